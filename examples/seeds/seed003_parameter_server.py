# Seed 003, ParameterServerStrategy: "parameter updates being handled by a separate parameter server"; the seed gives
# no code, so this is TensorFlow's own form (the parameter_server_training tutorial): the cluster comes from TF_CONFIG,
# the chief builds and compiles the model in the strategy's scope and calls fit with steps_per_epoch.
# Run a job with one parameter server and two workers: stratagem run --ps 1 --workers 2 examples/seeds/seed003_parameter_server.py
import os

import stratagem.tf as tf

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0

GLOBAL_BATCH_SIZE = 64
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).repeat().batch(GLOBAL_BATCH_SIZE)

with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.layers.Flatten(input_shape=(28, 28)),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=['accuracy'])

model.fit(train_dataset, epochs=int(os.environ.get('SEED_EPOCHS', 5)), steps_per_epoch=60)
test_loss, test_accuracy = model.evaluate(x_test, y_test, batch_size=GLOBAL_BATCH_SIZE)
print('Test accuracy: {}'.format(test_accuracy))
