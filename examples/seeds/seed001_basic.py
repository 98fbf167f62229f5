# Seed 001, "let's train simplest fashion MNIST model": mnist.py's dataset and CNN, one process.
import os
import json

import stratagem.tf as tf
import mnist

batch_size = 64

## GPU allocation part (important!)
gpu_devices = tf.config.experimental.list_physical_devices('GPU')
for device in gpu_devices:
    tf.config.experimental.set_memory_growth(device, True)


train_dataset, test_dataset = mnist.mnist_dataset(batch_size)

model = mnist.build_and_compile_cnn_model()
model.fit(train_dataset, epochs=3, steps_per_epoch=70)

eval_loss, eval_acc = model.evaluate(test_dataset)
