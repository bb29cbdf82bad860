"""Small Keras models -> TFLite (run with /work/venv-tf: tensorflow-cpu 2.21). Random weights, seed 0."""

import os

import tensorflow as tf

#: where make_keras_tflite.py writes the TFLite files gen_tfl.py converts
TFLITE = os.environ.get("TFLITE_DIR", "/tmp/new-exporters-tflite")

tf.keras.utils.set_random_seed(0)
K = tf.keras


def save(name, model, batch):
    # a fresh Keras Input with a fixed batch_size, so the TFLite graph is static (no VAR_HANDLE, no -1 signature)
    x = K.Input(model.inputs[0].shape[1:], batch_size=batch)
    fixed = K.Model(x, model(x))
    conv = tf.lite.TFLiteConverter.from_keras_model(fixed)
    open(f"{TFLITE}/{name}.tflite", "wb").write(conv.convert())
    print("ok", name)


x = K.Input((8, 8, 3))
h = K.layers.Conv2D(4, 3, padding="same", activation="relu", bias_initializer="random_normal")(x)
h = K.layers.MaxPool2D()(h)
h = K.layers.Flatten()(h)
y = K.layers.Dense(5, bias_initializer="random_normal", activation="softmax")(h)
cnn = K.Model(x, y)
x = K.Input((6,))
y = K.layers.Dense(3, bias_initializer="random_normal")(
    K.layers.Dense(8, bias_initializer="random_normal", activation="relu")(x)
)
dense = K.Model(x, y)
x = K.Input((8, 8, 3))
h = K.layers.DepthwiseConv2D(3, padding="same")(x)
h = K.layers.Conv2D(4, 1, activation="relu6", bias_initializer="random_normal")(h)
h = K.layers.AveragePooling2D(4)(h)
h = K.layers.Flatten()(h)
y = K.layers.Dense(3, bias_initializer="random_normal")(h)
mbv = K.Model(x, y)
x = K.Input((6,))
h = K.layers.Dense(4, bias_initializer="random_normal")(x)
y = K.layers.Lambda(lambda t: t - tf.reduce_mean(t, axis=0, keepdims=True))(h)
mean0 = K.Model(x, y)
x = K.Input((6,))
h = K.layers.Dense(4, bias_initializer="random_normal")(x)
y = K.layers.Lambda(lambda t: tf.nn.softmax(t, axis=0))(h)
soft0 = K.Model(x, y)
os.makedirs(TFLITE, exist_ok=True)
save("tfl_cnn_b1", cnn, 1)
save("tfl_dense_b1", dense, 1)
save("tfl_mbv_b1", mbv, 1)
save("tfl_mean0_b2", mean0, 2)
save("tfl_softmax0_b1", soft0, 1)
