"""new-exporters old-opset TorchScript models: torch.onnx.export(..., dynamo=False, opset_version=9/10/11).
Pins: torch==2.14.1 onnx==1.23.2 (venv /tmp/probe3/venv, read-only). Seed 0, random weights."""

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


def export(key, model, args, names, outs, opset, batchable, why, inputs, dyn=False, extra="", old_batch=1):
    model.eval()
    dynamic_axes = {n: {0: "batch"} for n in names + outs} if dyn else None
    try:
        torch.onnx.export(
            model,
            args,
            f"{OUT}/{key}.onnx",
            input_names=names,
            output_names=outs,
            opset_version=opset,
            dynamo=False,
            dynamic_axes=dynamic_axes,
        )
        m = onnx.load(f"{OUT}/{key}.onnx")
        note = ", dynamic batch" if dyn else f", static batch {old_batch}"
        meta.append(
            dict(
                key=key,
                exporter=f"TorchScript (pytorch 2.14.1, opset {opset}){note}",
                batchable=batchable,
                why=why,
                inputs=inputs,
                extra=extra,
            )
        )
        print(
            "ok",
            key,
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.input],
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.output],
            sorted({n.op_type for n in m.graph.node}),
        )
    except Exception as e:
        print("FAIL", key, type(e).__name__, str(e)[:300])


class Up(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        h = F.relu(self.c(x))
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        return h.view(h.size(0), -1).sum(-1, keepdim=True) * 0 + F.adaptive_avg_pool2d(h, 2).flatten(1)


class UpBil(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        h = F.relu(self.c(x))
        return F.interpolate(h, size=(x.size(2) * 2, x.size(3) * 2), mode="bilinear", align_corners=False)


class ViewFlat(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4, 5)

    def forward(self, x):
        h = F.adaptive_avg_pool2d(F.relu(self.c(x)), (2, 2))  # [B,4,2,2]
        return self.fc(h.view(x.size(0), -1)), torch.flatten(h, 1).max(1, keepdim=True)[0]


class SplitPS(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        a, b = torch.split(self.c(x), 4, dim=1)  # [B,4,4,4] each
        y = F.pixel_shuffle(a * torch.sigmoid(b), 2)  # [B,1,8,8]
        return y


class ExpandAs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.g = nn.Parameter(torch.randn(1, 4))

    def forward(self, x):
        h = self.fc(x)
        return h * self.g.expand_as(h) + torch.zeros_like(h).new_ones(h.size())


class Mean0(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        return (h - h.mean(0)) / (h.std(0, unbiased=False) + 1e-3)


class Sort0(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return torch.sort(self.fc(x), dim=0)[0]


x8 = torch.randn(1, 3, 8, 8)
x4 = torch.randn(1, 3, 4, 4)
x6 = torch.randn(1, 6)
export(
    "ts9_upsample_flat_b1",
    Up(),
    (x4,),
    ["x"],
    ["y"],
    9,
    True,
    "opset 9: interpolate(scale_factor=2, nearest) as Upsample with a scales input, h.view(h.size(0), -1), adaptive_avg_pool2d(2).flatten(1)",
    {"x": "B,3,4,4"},
)
export(
    "ts10_view_flatten_b1",
    ViewFlat(),
    (x8,),
    ["x"],
    ["y", "m"],
    10,
    True,
    "opset 10: adaptive_avg_pool2d((2,2)) as AveragePool, h.view(x.size(0), -1), Linear; torch.flatten(h,1).max(1)",
    {"x": "B,3,8,8"},
)
export(
    "ts11_bilinear_size_b1",
    UpBil(),
    (x4,),
    ["x"],
    ["y"],
    11,
    True,
    "opset 11: interpolate(size=(x.size(2)*2, x.size(3)*2), bilinear) as Resize with sizes built from Shape",
    {"x": "B,3,4,4"},
)
export(
    "ts11_split_pixelshuffle_b1",
    SplitPS(),
    (x4,),
    ["x"],
    ["y"],
    11,
    True,
    "opset 11: torch.split(h, 4, dim=1), a*sigmoid(b), pixel_shuffle(2) (exported as DepthToSpace)",
    {"x": "B,3,4,4"},
)
export(
    "ts9_expand_as_b1",
    ExpandAs(),
    (x6,),
    ["x"],
    ["y"],
    9,
    True,
    "opset 9: g.expand_as(h) (Expand to Shape(h)), new_ones(h.size()) (ConstantOfShape)",
    {"x": "B,6"},
)
export(
    "ts11_split_pixelshuffle_dyn",
    SplitPS(),
    (x4,),
    ["x"],
    ["y"],
    11,
    True,
    "opset 11 with dynamic_axes on batch: split, pixel_shuffle",
    {"x": "B,3,4,4"},
    dyn=True,
)
export(
    "ts10_view_flatten_dyn",
    ViewFlat(),
    (x8,),
    ["x"],
    ["y", "m"],
    10,
    True,
    "opset 10 with dynamic_axes on batch: adaptive pool, view(x.size(0), -1)",
    {"x": "B,3,8,8"},
    dyn=True,
)
export(
    "ts9_batchstd_b2",
    Mean0(),
    (torch.randn(2, 6),),
    ["x"],
    ["y"],
    9,
    False,
    "couples samples: (h - h.mean(0)) / h.std(0): normalisation over the batch axis, at batch 2",
    {"x": "B,6"},
    extra="old_batch = 2",
    old_batch=2,
)
export(
    "ts11_sort0_dyn",
    Sort0(),
    (torch.randn(2, 6),),
    ["x"],
    ["y"],
    11,
    False,
    "couples samples: torch.sort(h, dim=0) across the batch (TopK on axis 0 with k = Shape[0])",
    {"x": "B,6"},
    dyn=True,
)
export(
    "ts11_sort0_b1",
    Sort0(),
    (x6,),
    ["x"],
    ["y"],
    11,
    False,
    "couples samples: torch.sort(h, dim=0) across the batch, at batch 1",
    {"x": "B,6"},
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "torch_old.json").write_text(json.dumps(meta, indent=1))
