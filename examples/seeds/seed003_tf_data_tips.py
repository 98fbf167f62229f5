# Seed 003, "Performance Tips" for tf.data: interleave several files, filter, parallel map, cache, shuffle with a
# large buffer, batch, prefetch. The seed lists them in prose; this is one pipeline using all seven, feeding fit.
# The digits are first written as CSV shards, so there are files to interleave.
import os

import stratagem.tf as tf
import numpy as np

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
os.makedirs('digits_csv', exist_ok=True)
for shard in range(4):
  rows = np.concatenate([y_train[shard::4, None], x_train[shard::4].reshape(-1, 784)], axis=1)
  np.savetxt(os.path.join('digits_csv', 'train-{}.csv'.format(shard)), rows, fmt='%d', delimiter=',')

def parse_line(line):
  values = tf.strings.to_number(tf.strings.split(line, ','), out_type=tf.int32)
  image = tf.reshape(tf.cast(values[1:], tf.float32) / 255., (28, 28))
  return image, values[0]

files = tf.data.Dataset.list_files(os.path.join('digits_csv', 'train-*.csv'), shuffle=True)
train_dataset = (files.interleave(tf.data.TextLineDataset, cycle_length=4,            # 6. read files in parallel
                                  num_parallel_calls=tf.data.AUTOTUNE)
                 .map(parse_line, num_parallel_calls=tf.data.AUTOTUNE)                 # 3. parallel preprocessing
                 .filter(lambda image, label: tf.reduce_max(image) > 0)                # 7. drop blank images
                 .cache()                                                              # 2. cache after the parse
                 .shuffle(10000)                                                       # 4. a large shuffle buffer
                 .batch(64)                                                            # 5. batch
                 .prefetch(tf.data.AUTOTUNE))                                          # 1. overlap with training

model = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10)
])
model.compile(optimizer='adam',
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=['accuracy'])
model.fit(train_dataset, epochs=int(os.environ.get('SEED_EPOCHS', 5)))
test_loss, test_accuracy = model.evaluate(x_test / 255., y_test)
print('Test accuracy: {}'.format(test_accuracy))
