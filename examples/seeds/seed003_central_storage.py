# Seed 003, CentralStorageStrategy: "create a tf.distribute.experimental.CentralStorageStrategy instance and then use
# the strategy.scope context to create your Keras model and call the compile() and fit() methods within the scope."
# The seed gives no code; this is that sentence as TensorFlow code.
# Run with two replicas: stratagem run -n 2 examples/seeds/seed003_central_storage.py
import os

import stratagem.tf as tf

strategy = tf.distribute.experimental.CentralStorageStrategy()
print('Number of replicas in sync: {}'.format(strategy.num_replicas_in_sync))

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0

GLOBAL_BATCH_SIZE = 32 * strategy.num_replicas_in_sync

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Flatten(input_shape=(28, 28)),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(optimizer='adam',
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=['accuracy'])
  model.fit(x_train, y_train, batch_size=GLOBAL_BATCH_SIZE, epochs=int(os.environ.get('SEED_EPOCHS', 5)))

test_loss, test_accuracy = model.evaluate(x_test, y_test, batch_size=GLOBAL_BATCH_SIZE)
print('Test accuracy: {}'.format(test_accuracy))
