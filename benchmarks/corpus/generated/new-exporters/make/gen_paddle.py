"""new-exporters paddle2onnx models. Pins: paddlepaddle==3.3.1 paddle2onnx==2.0.1 onnx==1.23.2 (a venv of their own). Seed 0, random weights."""

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


def export(key, layer, specs, batchable, why, inputs, extra="", note=""):
    layer.eval()
    path = os.path.join(OUT, key)
    try:
        paddle.onnx.export(layer, path, input_spec=specs, opset_version=13)
        meta.append(dict(key=key, exporter=EXP + note, batchable=batchable, why=why, inputs=inputs, extra=extra))
        print("ok", key)
    except Exception as e:
        print("FAIL", key, type(e).__name__, str(e)[:300])


class CNN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2D(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2D(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.c(x))), 2)
        h = paddle.reshape(h, [0, -1])
        return self.fc(h)


class CNN2(nn.Layer):  # reshape from x.shape[0] and -1-first, flatten, mean over H
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2D(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8, 5)

    def forward(self, x):
        h = F.relu(self.c(x))  # [B,4,8,8]
        h = paddle.mean(h, axis=2)  # [B,4,8]
        h = paddle.reshape(h, [-1, 4 * 8])
        b = paddle.shape(x)[0]
        y = self.fc(h)
        return paddle.reshape(y, [b, 5, 1]) * paddle.ones([1, 5, 2])


class Enc(nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(6, 8)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 1)

    def forward(self, x):
        return self.enc(self.emb(x))


class LSTM(nn.Layer):
    def __init__(self):
        super().__init__()
        self.l = nn.LSTM(5, 6, num_layers=2)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        y, (h, c) = self.l(x)
        return self.fc(y), h


class Det(nn.Layer):  # detector-like head: per-anchor scores, topk over anchors, gather boxes with batch index
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2D(3, 6, 1)

    def forward(self, x):
        h = self.c(x)  # [B,6,4,4]
        h = paddle.transpose(paddle.reshape(h, [0, 6, -1]), [0, 2, 1])  # [B,16,6]
        boxes, logits = h[:, :, :4], h[:, :, 4:]
        score = paddle.max(F.sigmoid(logits), axis=-1)  # [B,16]
        val, idx = paddle.topk(score, 5, axis=1)
        sel = paddle.take_along_axis(boxes, paddle.tile(idx.unsqueeze(-1), [1, 1, 4]), axis=1)
        return val, sel


class Mean0(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        return h - paddle.mean(h, axis=0, keepdim=True)


class Gram(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        return paddle.matmul(h, h, transpose_y=True)


for b, tag in ((None, "dyn"), (1, "b1")):
    note = ", batch None" if b is None else ", static batch 1"
    export(
        f"pd_cnn_reshape0_{tag}",
        CNN(),
        [InputSpec([b, 3, 8, 8], "float32", "x")],
        True,
        "conv+BatchNorm+relu+maxpool, paddle.reshape(h, [0, -1]) (0 = copy the batch), Linear",
        {"x": "B,3,8,8"},
        note=note,
    )
    export(
        f"pd_lstm2_{tag}",
        LSTM(),
        [InputSpec([b, 4, 5], "float32", "x")],
        True,
        "paddle.nn.LSTM 2 layers batch-major; outputs fc(y) [B,4,3] and h [2,B,6] (batch on axis 1)",
        {"x": "B,4,5"},
        extra="output_axes = { fetch_name_1 = 1 }",
        note=note,
    )
export(
    "pd_cnn_shape0_b1",
    CNN2(),
    [InputSpec([1, 3, 8, 8], "float32", "x")],
    True,
    "conv, mean over H, paddle.reshape(h, [-1, 32]), Linear, reshape to [paddle.shape(x)[0], 5, 1] times ones [1,5,2]",
    {"x": "B,3,8,8"},
    note=", static batch 1",
)
export(
    "pd_encoder_b1",
    Enc(),
    [InputSpec([1, 5, 6], "float32", "x")],
    True,
    "Linear then nn.TransformerEncoder (1 layer, 2 heads, no mask)",
    {"x": "B,5,6"},
    note=", static batch 1",
)
export(
    "pd_encoder_dyn",
    Enc(),
    [InputSpec([None, 5, 6], "float32", "x")],
    True,
    "Linear then nn.TransformerEncoder (1 layer, 2 heads), batch None",
    {"x": "B,5,6"},
    note=", batch None",
)
export(
    "pd_det_topk_b1",
    Det(),
    [InputSpec([1, 3, 4, 4], "float32", "x")],
    True,
    "detector-like head: 1x1 conv, reshape [0,6,-1] transpose, sigmoid max over classes, topk 5 over anchors, take_along_axis of boxes with tile(idx[...,None],[1,1,4])",
    {"x": "B,3,4,4"},
    note=", static batch 1",
)
export(
    "pd_mean0_dyn",
    Mean0(),
    [InputSpec([None, 6], "float32", "x")],
    False,
    "couples samples: h - mean(h, axis=0) over the batch",
    {"x": "B,6"},
    note=", batch None",
)
export(
    "pd_mean0_b2",
    Mean0(),
    [InputSpec([2, 6], "float32", "x")],
    False,
    "couples samples: h - mean(h, axis=0) over the batch, exported at batch 2",
    {"x": "B,6"},
    extra="old_batch = 2",
    note=", static batch 2",
)
export(
    "pd_gram_b1",
    Gram(),
    [InputSpec([1, 6], "float32", "x")],
    False,
    "couples samples: Gram matrix h @ h.T [B,B] between samples, at batch 1",
    {"x": "B,6"},
    note=", static batch 1",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "paddle.json").write_text(json.dumps(meta, indent=1))
