# Seed 002: MultiWorkerMirroredStrategy directed by the TF_CONFIG the seed shows (two workers on localhost).
# Each worker is the same script with its own task index:
#   python examples/seeds/seed002_tf_config.py 0 & python examples/seeds/seed002_tf_config.py 1
import json
import os
import sys

import stratagem.tf as tf

tf_config = {
    'cluster': {
        'worker': os.environ.get('SEED_WORKERS', 'localhost:12345,localhost:23456').split(',')
    },
    'task': {'type': 'worker', 'index': int(sys.argv[1])}
}
os.environ['TF_CONFIG'] = json.dumps(tf_config)

# Initiate the strategy at the beginning of the program, before any other tensor operation.
strategy = tf.distribute.MultiWorkerMirroredStrategy()

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0

BATCH_SIZE_PER_REPLICA = 16
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(GLOBAL_BATCH_SIZE)

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Flatten(input_shape=(28, 28)),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(optimizer='adam',
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=['accuracy'])

model.fit(train_dataset, epochs=int(os.environ.get('SEED_EPOCHS', 5)))
test_loss, test_accuracy = model.evaluate(test_dataset)
print('Test accuracy: {}'.format(test_accuracy))
