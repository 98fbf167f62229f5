import os

#!pip install -q -U tensorflow-gpu
import stratagem.tf as tf
import keras

import numpy as np

# The seed downloads Kaggle's Retinal OCT images (`kaggle datasets download -d paultimothymooney/kermany2018`);
# here the same OCT2017/<split>/<label>/*.jpeg layout is written from the bundled digits (digit i is class i).
if not os.path.isdir('OCT2017'):
  from PIL import Image
  (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
  for split, images, digits in (('train', x_train, y_train), ('test', x_test, y_test)):
    for index, label in enumerate(['CNV', 'DME', 'DRUSEN', 'NORMAL']):
      os.makedirs(os.path.join('OCT2017', split, label), exist_ok=True)
      for i, image in enumerate(images[digits == index][:100]):
        Image.fromarray(image).convert('RGB').save(os.path.join('OCT2017', split, label, '{}.jpeg'.format(i)))

train_folder = os.path.join('OCT2017', 'train', '**', '*.jpeg')
test_folder = os.path.join('OCT2017', 'test', '**', '*.jpeg')

labels = ['CNV', 'DME', 'DRUSEN', 'NORMAL']

IMAGE_SIZE = int(os.environ.get('SEED_IMAGE_SIZE', 224))

def input_fn(file_pattern, labels,
             image_size=(IMAGE_SIZE,IMAGE_SIZE),
             shuffle=False,
             batch_size=64, 
             num_epochs=None, 
             buffer_size=4096,
             prefetch_buffer_size=4):

    table = tf.contrib.lookup.index_table_from_tensor(mapping=tf.constant(labels))
    num_classes = len(labels)

    def _map_func(filename):
        label = tf.string_split([filename], delimiter=os.sep).values[-2]
        image = tf.image.decode_jpeg(tf.read_file(filename), channels=3)
        image = tf.image.convert_image_dtype(image, dtype=tf.float32)
        image = tf.image.resize_images(image, size=image_size)
        return ({"input_1": image}, tf.one_hot(table.lookup(label), num_classes))
    
    dataset = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle)

    if num_epochs is not None and shuffle:
        dataset = dataset.apply(tf.contrib.data.shuffle_and_repeat(buffer_size, num_epochs))
    elif shuffle:
        dataset = dataset.shuffle(buffer_size)
    elif num_epochs is not None:
        dataset = dataset.repeat(num_epochs)

    dataset = dataset.apply(tf.contrib.data.map_and_batch(map_func=_map_func,
                                                          batch_size=batch_size,
                                                          num_parallel_calls=os.cpu_count()))
    dataset = dataset.prefetch(buffer_size=prefetch_buffer_size)
    
    return dataset

# The seed's VGG16 comes with ImageNet weights, a download stratagem.tf refuses (tf.keras.applications); Keras 3's own
# VGG16 without them (weights=None) is the architecture, trained from scratch here.
keras_vgg16 = keras.applications.VGG16(input_shape=(IMAGE_SIZE,IMAGE_SIZE,3),
                                          include_top=False, weights=None)

output = keras_vgg16.output
output = tf.keras.layers.Flatten()(output)
predictions = tf.keras.layers.Dense(len(labels), activation=tf.nn.softmax)(output)

model = tf.keras.Model(inputs=keras_vgg16.input, outputs=predictions)

for layer in keras_vgg16.layers[:-4]:
    layer.trainable = False

optimizer = tf.train.AdamOptimizer()

model.compile(loss='categorical_crossentropy', 
              optimizer=optimizer,
              metrics=['accuracy'])

strategy = tf.contrib.distribute.MirroredStrategy()
config = tf.estimator.RunConfig(train_distribute=strategy)
estimator = tf.keras.estimator.model_to_estimator(model, config=config)

estimator.train(input_fn=lambda:input_fn(train_folder,
                                         labels,
                                         shuffle=True,
                                         batch_size=32,
                                         buffer_size=2048,
                                         num_epochs=20),
                steps=int(os.environ.get('SEED_STEPS', 1000)))

print(estimator.evaluate(input_fn=lambda:input_fn(test_folder,
                                            labels, 
                                            shuffle=True,
                                            batch_size=64,
                                            buffer_size=1024,
                                            num_epochs=1,
                                            prefetch_buffer_size=2)))
