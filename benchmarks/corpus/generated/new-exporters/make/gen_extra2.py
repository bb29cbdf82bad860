"""new-exporters extra rows 2: batch squeezed away at export, GroupNorm by hand through view(1, B*G, -1), a constant ones column.
Pins: torch==2.14.1 onnx==1.23.2 (venv /tmp/probe3/venv). Seed 0."""

import json
import warnings
from pathlib import Path

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
torch.manual_seed(0)
OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
meta = []


def export(key, model, x, opset, why, batchable=True, shape="B,4,6"):
    model.eval()
    torch.onnx.export(
        model, (x,), f"{OUT}/{key}.onnx", input_names=["x"], output_names=["y"], opset_version=opset, dynamo=False
    )
    m = onnx.load(f"{OUT}/{key}.onnx")
    meta.append(
        dict(
            key=key,
            exporter=f"TorchScript (pytorch 2.14.1, opset {opset}), static batch 1",
            batchable=batchable,
            why=why,
            inputs={"x": shape},
            extra="",
        )
    )
    print("ok", key, sorted({n.op_type for n in m.graph.node}))


class SqueezeB(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):  # x [1, T, D]: written for one sample
        h = self.fc(x.squeeze(0))  # [T, D]
        a = torch.softmax(h @ h.t(), -1)  # [T, T]
        return (a @ h).unsqueeze(0)


class GNByHand(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 4, 1)

    def forward(self, x):  # x [B, 4, 6]
        b = x.size(0)
        h = F.instance_norm(self.c(x).reshape(1, b * 2, -1))  # 2 groups of 2 channels
        return h.reshape(b, 4, 6)


class OnesCol(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(7, 3)

    def forward(self, x):  # x [B, 6]
        return self.fc(torch.cat([x, torch.ones(x.size(0), 1)], 1))


export(
    "ts11_squeeze_batch_b1",
    SqueezeB(),
    torch.randn(1, 4, 6),
    11,
    "written for one sample: x.squeeze(0), Linear, softmax(h @ h.t()), (a @ h).unsqueeze(0); the batch axis is squeezed away inside",
)
export(
    "ts11_groupnorm_view1_b1",
    GNByHand(),
    torch.randn(1, 4, 6),
    11,
    "group norm by hand: conv(x).reshape(1, b*2, -1) (b = x.size(0) traced to 1), instance_norm, reshape(b, 4, 6)",
)
export(
    "ts11_cat_ones_col_b1",
    OnesCol(),
    torch.randn(1, 6),
    11,
    "torch.cat([x, torch.ones(x.size(0), 1)], 1) (the ones folded to a constant [1, 1] at batch 1), Linear",
    shape="B,6",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "extra2.json").write_text(json.dumps(meta, indent=1))
