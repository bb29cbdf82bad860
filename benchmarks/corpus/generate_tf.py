"""The tf2onnx exports of the corpus (``generate.py keras tflite``): Keras models at opset 9 (IR 4) and 13,
Keras RNNs and attention at a static batch 1, and TFLite models through ``from_tflite``. Run in the
TensorFlow venv (``.venv-corpus-tf``); ``generate.py`` writes them (``save``) with the corpus's seed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: generate.py's writer: (package, file name, model)
Save = Callable[[str, str, Any], None]


# -- tf2onnx: Keras models, opset 9 (IR 4) and 13 --------------------------------------------------------------
def keras(save: Save, seed: int) -> None:
    import tensorflow as tf
    import tf2onnx

    tf.keras.utils.set_random_seed(seed)
    keras_ = tf.keras
    cnn = keras_.Sequential(
        [
            keras_.Input((16, 16, 3), batch_size=None, name="image"),
            keras_.layers.Conv2D(4, 3, padding="same", activation="relu"),
            keras_.layers.MaxPooling2D(),
            keras_.layers.Flatten(),
            keras_.layers.Dense(5, activation="softmax"),
        ]
    )
    lstm = keras_.Sequential(
        [
            keras_.Input((7, 6), batch_size=None, name="series"),
            keras_.layers.LSTM(8, return_sequences=True),
            keras_.layers.Dense(3),
        ]
    )
    for name, model, shape, opset in (
        ("keras_cnn_op9.onnx", cnn, (None, 16, 16, 3), 9),
        ("keras_cnn_op13.onnx", cnn, (None, 16, 16, 3), 13),
        ("keras_cnn_op9_b1.onnx", cnn, (1, 16, 16, 3), 9),
        ("keras_lstm_op13.onnx", lstm, (None, 7, 6), 13),
    ):
        signature = (tf.TensorSpec(shape, tf.float32, name=model.inputs[0].name.split(":")[0]),)
        function = tf.function(lambda x, m=model: m(x))
        converted, _ = tf2onnx.convert.from_function(function, input_signature=signature, opset=opset)
        save("tf2onnx", name, converted)
    _keras_static(tf, tf2onnx, save)


def _keras_static(tf: Any, tf2onnx: Any, save: Save) -> None:
    """Keras RNNs and attention converted at a static batch of 1, as apps export them: tf2onnx writes the
    time-major transpose of a batch of 1 as a Reshape ([1, 7, 5] -> [7, 1, 5]) and runs the RNN as a Loop
    of 7 steps from a constant zero state [1, H]. A masked LSTM also at a dynamic batch (sequence lengths
    computed from the mask)."""
    keras_ = tf.keras
    seq = keras_.Input((7, 5), name="seq")
    masked = keras_.Model(seq, keras_.layers.Dense(3)(keras_.layers.LSTM(8)(keras_.layers.Masking(0.0)(seq))))
    seq = keras_.Input((7, 5), name="seq")
    pooled = keras_.layers.GlobalAveragePooling1D()(
        keras_.layers.Bidirectional(keras_.layers.GRU(6, return_sequences=True))(seq)
    )
    bigru = keras_.Model(seq, keras_.layers.Dense(2)(pooled))
    image = keras_.Input((16, 16, 3), name="img")
    tokens = keras_.layers.Reshape((-1, 4))(
        keras_.layers.UpSampling2D(2)(keras_.layers.Conv2D(4, 3, padding="same")(image))
    )
    attended = keras_.layers.MultiHeadAttention(2, 4)(tokens, tokens)
    attention = keras_.Model(image, keras_.layers.GlobalAveragePooling1D()(attended))
    for name, model, batch in (
        ("keras_masked_lstm_op13_b1.onnx", masked, 1),
        ("keras_masked_lstm_op13.onnx", masked, None),
        ("keras_bigru_op13_b1.onnx", bigru, 1),
        ("keras_upsample_mha_op13_b1.onnx", attention, 1),
    ):
        signature = [tf.TensorSpec([batch, *i.shape[1:]], i.dtype, name=i.name) for i in model.inputs]
        converted, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=13)
        save("tf2onnx", name, converted)
    _keras_rnns(tf, tf2onnx, save)


def _keras_rnns(tf: Any, tf2onnx: Any, save: Save) -> None:
    """More Keras RNNs at a static batch 1: a Dense after every step (the transpose back to the batch first
    folded into the Dense's Reshape), stacked LSTMs, a SimpleRNN (its state's Gemm takes the step's
    projection as C, which needs the state repeated to the batch), an LSTM's states as outputs, Dense
    layers TimeDistributed around an LSTM, a ConvLSTM2D; stacked LSTMs also at opset 9 (IR 4)."""
    keras_, layers = tf.keras, tf.keras.layers
    models = {}
    seq = keras_.Input((7, 5), name="seq")
    models["gru_seq"] = keras_.Model(seq, layers.Dense(3)(layers.GRU(6, return_sequences=True)(seq)))
    seq = keras_.Input((7, 5), name="seq")
    stacked = layers.LSTM(4)(layers.LSTM(6, return_sequences=True)(seq))
    models["stacked_lstm"] = keras_.Model(seq, layers.Dense(2)(stacked))
    seq = keras_.Input((7, 5), name="seq")
    models["simplernn"] = keras_.Model(seq, layers.Dense(2)(layers.SimpleRNN(6)(seq)))
    seq = keras_.Input((7, 5), name="seq")
    models["lstm_state"] = keras_.Model(seq, list(layers.LSTM(4, return_state=True)(seq)))
    seq = keras_.Input((6, 4), name="seq")
    inner = layers.LSTM(5, return_sequences=True)(layers.TimeDistributed(layers.Dense(3))(seq))
    models["td_lstm"] = keras_.Model(seq, layers.TimeDistributed(layers.Dense(2))(inner))
    clip = keras_.Input((4, 8, 8, 2), name="clip")
    pooled = layers.GlobalAveragePooling2D()(layers.ConvLSTM2D(3, 3, padding="same")(clip))
    models["convlstm"] = keras_.Model(clip, layers.Dense(2)(pooled))
    for name, opset in [(name, 13) for name in models] + [("stacked_lstm", 9)]:
        model = models[name]
        signature = [tf.TensorSpec([1, *i.shape[1:]], i.dtype, name=i.name) for i in model.inputs]
        converted, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=opset)
        save("tf2onnx", f"keras_{name}_op{opset}_b1.onnx", converted)


# -- tf2onnx from TFLite: static batch 1, NHWC, as on-device models ship ------------------------------------------
def tflite(save: Save, seed: int) -> None:
    """Keras/TF functions converted to TFLite (static shapes), then by tf2onnx's ``from_tflite``: a CNN at
    batch 1, and a log-mel that folds its waveform into rows and frames them through a constant table of
    row indices (EfficientWord-Net's ``logmelcalc.tflite`` does this; not batchable: the table reads the
    exported sample's rows only)."""
    import tensorflow as tf
    import tf2onnx

    tf.keras.utils.set_random_seed(seed)
    frames = np.array([[i + k for k in range(5)] for i in range(0, 16, 2)], dtype=np.int32)  # 8 frames, 5 rows
    window = np.hanning(400).astype(np.float32)[None, :]
    mel = np.random.default_rng(seed).random((400, 16)).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec((1, 1600), tf.float32, name="waveform")])
    def logmel(x: object) -> object:
        rows = tf.reshape(x, [20, 80])
        framed = tf.reshape(tf.gather(rows, frames), [8, 400]) * window
        return tf.math.log(tf.matmul(framed * framed, mel) + 1e-6)

    keras_ = tf.keras
    cnn = keras_.Sequential(
        [
            keras_.Input((16, 16, 3), batch_size=1, name="image"),
            keras_.layers.Conv2D(4, 3, padding="same", activation="relu"),
            keras_.layers.MaxPooling2D(),
            keras_.layers.Flatten(),
            keras_.layers.Dense(5, activation="softmax"),
        ]
    )
    converters = {
        "tflite_logmel_frames.onnx": tf.lite.TFLiteConverter.from_concrete_functions(
            [logmel.get_concrete_function()], logmel
        ),
        "tflite_cnn_b1.onnx": tf.lite.TFLiteConverter.from_keras_model(cnn),
    }
    for name, model in _tflite_rnns(keras_).items():
        converters[f"tflite_{name}_b1.onnx"] = tf.lite.TFLiteConverter.from_keras_model(model)
    with tempfile.TemporaryDirectory() as folder:
        for name, converter in converters.items():
            flat = Path(folder) / name.replace(".onnx", ".tflite")
            flat.write_bytes(converter.convert())
            converted, _ = tf2onnx.convert.from_tflite(str(flat), opset=13)
            save("tf2onnx-tflite", name, _folded_names_in_order(converted))


def _tflite_rnns(keras_: Any) -> dict[str, Any]:
    """Keras RNNs at batch 1 as TFLite writes them (a while-loop bounded by INT64_MAX whose condition counts
    the steps; each step's state written [1, 1, H] and squeezed): a GRU with a Dense per step, an LSTM
    whose recurrent product is squeezed to [4H] before a Gemm adds it, a bidirectional LSTM, and a Conv1D
    before an LSTM (its NHWC output [1, 1, 10, 8] made time-major [10, 1, 8] by one Reshape)."""
    layers, models = keras_.layers, {}
    seq = keras_.Input((7, 5), batch_size=1, name="seq")
    models["gru_seq"] = keras_.Model(seq, layers.Dense(3)(layers.GRU(6, return_sequences=True)(seq)))
    seq = keras_.Input((7, 5), batch_size=1, name="seq")
    models["lstm"] = keras_.Model(seq, layers.Dense(3)(layers.LSTM(6)(seq)))
    seq = keras_.Input((7, 5), batch_size=1, name="seq")
    models["bilstm"] = keras_.Model(seq, layers.Bidirectional(layers.LSTM(4))(seq))
    seq = keras_.Input((12, 5), batch_size=1, name="seq")
    models["conv_lstm"] = keras_.Model(
        seq, layers.Dense(2)(layers.LSTM(6)(layers.Conv1D(8, 3, activation="relu")(seq)))
    )
    return models


def _folded_names_in_order(model: Any) -> Any:
    """tf2onnx's from_tflite numbers the constants it folds in an order that changes from run to run (the
    values and the graph do not): they are numbered again in the order the nodes first read them, in the
    main graph and then in each Loop body (an RNN's while-loop folds constants there too)."""
    graphs = list(_graphs(model.graph))
    folded = {i.name for graph in graphs for i in graph.initializer if i.name.startswith("const_fold_opt__")}
    order = [name for graph in graphs for node in graph.node for name in node.input if name in folded]
    names = {old: f"const_fold_opt__{n}" for n, old in enumerate(dict.fromkeys(order))}
    for graph in graphs:
        for tensor in graph.initializer:
            tensor.name = names.get(tensor.name, tensor.name)
        places = [n for n, tensor in enumerate(graph.initializer) if tensor.name in names.values()]
        copies = []
        for place in places:
            copy = type(graph.initializer[place])()
            copy.CopyFrom(graph.initializer[place])
            copies.append(copy)
        for place, tensor in zip(places, sorted(copies, key=lambda t: int(t.name.rsplit("_", 1)[1]))):
            graph.initializer[place].CopyFrom(tensor)
        for node in graph.node:
            node.input[:] = [names.get(name, name) for name in node.input]
    return model


def _graphs(graph: Any) -> Any:
    """``graph`` and every body in it, depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _graphs(attribute.g)
