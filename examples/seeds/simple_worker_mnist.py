# Seed 001, simple_worker_mnist.py: MultiWorkerMirroredStrategy; each process gets its role from TF_CONFIG.
# Two workers on this host, each in its own shell:
#   TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}}' python examples/seeds/simple_worker_mnist.py
#   TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 1}}' python examples/seeds/simple_worker_mnist.py
import os
import json

import stratagem.tf as tf
import mnist

per_worker_batch_size = 64

## This is a necessary part only for manual cluster setup.
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

gpu_devices = tf.config.experimental.list_physical_devices('GPU')
for device in gpu_devices:
    tf.config.experimental.set_memory_growth(device, True)

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers ## 수동 클러스터 설정시 필요한 부분입니다.
multi_worker_dataset, test_dataset = mnist.mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist.build_and_compile_cnn_model()
    multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)
eval_loss, eval_acc = multi_worker_model.evaluate(test_dataset)
