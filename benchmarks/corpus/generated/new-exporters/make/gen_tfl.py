"""new-exporters tflite2onnx models: TFLite files from make_keras_tflite.py (tensorflow-cpu 2.21 in /work/venv-tf) converted with
tflite2onnx 0.4.1 (a venv of their own)."""

import json
import os
from pathlib import Path

import onnx
import tflite2onnx

#: where make_keras_tflite.py writes the TFLite files gen_tfl.py converts
TFLITE = os.environ.get("TFLITE_DIR", "/tmp/new-exporters-tflite")

OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
EXP = "tflite2onnx 0.4.1 (TFLite from tensorflow 2.21 Keras)"
rows = [
    (
        "tfl_cnn_b1",
        True,
        "Keras Conv2D(same, relu) NHWC, MaxPool, Flatten, Dense softmax; TFLite at batch 1; tflite2onnx makes the input NCHW and adds Transposes",
        "B,3,8,8",
        "",
    ),
    ("tfl_dense_b1", True, "Keras Dense(relu), Dense; TFLite FULLY_CONNECTED at batch 1", "B,6", ""),
    (
        "tfl_mbv_b1",
        True,
        "MobileNet-like: DepthwiseConv2D, 1x1 Conv2D relu6, AveragePooling2D(4), Flatten (TFLite RESHAPE with a baked [1,16]), Dense",
        "B,3,8,8",
        "",
    ),
    (
        "tfl_mean0_b2",
        False,
        "couples samples: h - reduce_mean(h, axis=0) over the batch, TFLite at batch 2",
        "B,6",
        "old_batch = 2",
    ),
    ("tfl_softmax0_b1", False, "couples samples: softmax over axis 0 (the batch), TFLite at batch 1", "B,6", ""),
]
meta = []
for key, ok, why, shape, extra in rows:
    try:
        tflite2onnx.convert(f"{TFLITE}/{key}.tflite", f"{OUT}/{key}.onnx")
        m = onnx.load(f"{OUT}/{key}.onnx")
        name = m.graph.input[0].name
        print(
            "ok",
            key,
            m.ir_version,
            [(o.domain, o.version) for o in m.opset_import],
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.input],
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.output],
        )
        meta.append(
            dict(
                key=key,
                exporter=EXP + (", static batch 2" if "b2" in key else ", static batch 1"),
                batchable=ok,
                why=why,
                inputs={name: shape},
                extra=extra,
            )
        )
    except Exception as e:
        print("FAIL", key, type(e).__name__, str(e)[:300])
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "tfl.json").write_text(json.dumps(meta, indent=1))
