"""new-exporters paddle2onnx models, second set. Pins: paddlepaddle==3.3.1 paddle2onnx==2.0.1 (a venv of their own). Seed 0."""

import json
import os
from pathlib import Path

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

paddle.seed(0)
np.random.seed(0)
OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
EXP = "paddle2onnx 2.0.1 (paddlepaddle 3.3.1, opset 13)"
meta = []


def export(key, layer, specs, batchable, why, inputs, extra="", note=", static batch 1"):
    layer.eval()
    try:
        paddle.onnx.export(layer, os.path.join(OUT, key), input_spec=specs, opset_version=13)
        meta.append(dict(key=key, exporter=EXP + note, batchable=batchable, why=why, inputs=inputs, extra=extra))
        print("ok", key)
    except Exception as e:
        print("FAIL", key, type(e).__name__, str(e)[:300])


class Yolo(nn.Layer):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2D(3, 2 * (5 + 3), 1)

    def forward(self, x, img_size):
        boxes, scores = paddle.vision.ops.yolo_box(
            self.c(x), img_size, anchors=[4, 6, 8, 10], class_num=3, conf_thresh=0.0, downsample_ratio=8, clip_bbox=True
        )
        return boxes, scores


class PosEmb(nn.Layer):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 6)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):  # [B, T, 6]
        t = paddle.shape(x)[1]
        pos = paddle.arange(t).unsqueeze(0).expand([paddle.shape(x)[0], t])
        h = x + self.e(pos)
        h = paddle.flatten(h, 0, 1)  # [B*T, 6]
        return paddle.reshape(self.fc(h), [-1, 4, 3])


class BiGRU(nn.Layer):
    def __init__(self):
        super().__init__()
        self.g = nn.GRU(5, 4, direction="bidirect")
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        y, h = self.g(x)
        return self.fc(y[:, -1]), h


class Interp(nn.Layer):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2D(3, 4, 3, padding=1)

    def forward(self, x):
        h = F.interpolate(F.relu(self.c(x)), size=[8, 8], mode="bilinear")
        return paddle.mean(h, axis=[2, 3], keepdim=True).expand_as(h) + h


class InstNormBatch(nn.Layer):  # control: BatchNorm in training mode has no export; use paddle.std over axis 0
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        return F.softmax(h, axis=0) * paddle.std(h, axis=0)


export(
    "pd_yolo_box_b1",
    Yolo(),
    [InputSpec([1, 3, 16, 16], "float32", "x"), InputSpec([1, 2], "int32", "img_size")],
    True,
    "paddle.vision.ops.yolo_box on a 1x1 conv head (2 anchors, 3 classes) with img_size [B, 2] int32: boxes [B, M, 4], scores [B, M, 3]",
    {"x": "B,3,16,16", "img_size": {"shape": "B,2", "low": 64, "high": 256}},
)
export(
    "pd_posemb_flatten_b1",
    PosEmb(),
    [InputSpec([1, 4, 6], "float32", "x")],
    True,
    "positions paddle.arange(shape(x)[1]).unsqueeze(0).expand([shape(x)[0], t]), Embedding, paddle.flatten(h, 0, 1) merging batch and time, Linear, reshape [-1, 4, 3]",
    {"x": "B,4,6"},
)
export(
    "pd_bigru_b1",
    BiGRU(),
    [InputSpec([1, 3, 5], "float32", "x")],
    True,
    "bidirectional paddle.nn.GRU, fc(y[:, -1]) and h [2, B, 4] (batch on axis 1)",
    {"x": "B,3,5"},
    extra="output_axes = { fetch_name_1 = 1 }",
)
export(
    "pd_interp_expand_b1",
    Interp(),
    [InputSpec([1, 3, 4, 4], "float32", "x")],
    True,
    "conv, F.interpolate(size=[8, 8], bilinear), the spatial mean expand_as(h) plus h",
    {"x": "B,3,4,4"},
)
export(
    "pd_softmax0_std0_dyn",
    InstNormBatch(),
    [InputSpec([None, 6], "float32", "x")],
    False,
    "couples samples: softmax(h, axis=0) * std(h, axis=0) over the batch",
    {"x": "B,6"},
    note=", batch None",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "paddle2.json").write_text(json.dumps(meta, indent=1))
