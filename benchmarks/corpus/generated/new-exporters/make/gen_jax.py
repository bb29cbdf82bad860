"""new-exporters jax2onnx models. Pins: jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 jax2onnx==0.17.1 onnx==1.23.2 (a venv of their own). Random weights, seed 0."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import onnx
from flax import nnx
from jax2onnx import to_onnx

OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
EXP = "jax2onnx 0.17.1 (jax 0.10.2, flax 0.12.8, opset 23)"
meta = []


def export(key, fn, shapes, batchable, why, inputs, names, extra="", note=""):
    try:
        m = to_onnx(fn, shapes, model_name=key, input_names=names)
        onnx.save(m, f"{OUT}/{key}.onnx")
        meta.append(dict(key=key, exporter=EXP + note, batchable=batchable, why=why, inputs=inputs, extra=extra))
        print(
            "ok",
            key,
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.input],
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.output],
        )
    except Exception as e:
        import traceback

        traceback.print_exc()
        print("FAIL", key, type(e).__name__, str(e)[:300])


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(6, 8, rngs=rngs)
        self.l2 = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x):
        return nnx.softmax(self.l2(nnx.gelu(self.l1(x))), axis=-1)


class ConvNet(nnx.Module):  # NHWC
    def __init__(self, rngs):
        self.c = nnx.Conv(3, 4, (3, 3), rngs=rngs)
        self.l = nnx.Linear(4 * 4 * 4, 5, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.c(x))
        h = nnx.avg_pool(h, window_shape=(2, 2), strides=(2, 2))
        h = h.reshape(x.shape[0], -1)
        return self.l(h)


class Attn(nnx.Module):  # single-sample attention, vmapped over the batch
    def __init__(self, rngs):  # plain arrays: jax2onnx has no batching rule for its nnx.linear primitive
        k = jax.random.split(jax.random.key(0), 3)
        self.wq, self.wk, self.wv = (nnx.Param(jax.random.normal(i, (6, 6)) * 0.4) for i in k)

    def one(self, x):  # x [T, D]
        a = jax.nn.softmax((x @ self.wq[...]) @ (x @ self.wk[...]).T / jnp.sqrt(6.0), axis=-1)
        return (a @ (x @ self.wv[...])).mean(0)

    def __call__(self, x):
        return jax.vmap(self.one)(x)


class Mean0(nnx.Module):
    def __init__(self, rngs):
        self.l = nnx.Linear(6, 4, rngs=rngs)

    def __call__(self, x):
        h = self.l(x)
        return h - h.mean(0, keepdims=True)


class Soft0(nnx.Module):
    def __init__(self, rngs):
        self.l = nnx.Linear(6, 4, rngs=rngs)

    def __call__(self, x):
        return jax.nn.softmax(self.l(x), axis=0)


r = lambda: nnx.Rngs(0)
for b, tag, note in ((1, "b1", ", static batch 1"), ("B", "sym", ", symbolic batch 'B'")):
    export(
        f"jx_mlp_{tag}",
        MLP(r()),
        [(b, 6)],
        True,
        "flax nnx MLP: Linear, gelu, Linear, softmax(-1)",
        {"x": "B,6"},
        ["x"],
        note=note,
    )
    export(
        f"jx_conv_{tag}",
        ConvNet(r()),
        [(b, 8, 8, 3)],
        True,
        "flax nnx Conv (NHWC), relu, avg_pool 2, h.reshape(x.shape[0], -1), Linear",
        {"x": "B,8,8,3"},
        ["x"],
        note=note,
    )
    export(
        f"jx_attn_vmap_{tag}",
        Attn(r()),
        [(b, 5, 6)],
        True,
        "per-sample self-attention (q k^T softmax v, mean over T) written for one sample and jax.vmap'ed over the batch",
        {"x": "B,5,6"},
        ["x"],
        note=note,
    )
export(
    "jx_mean0_b2",
    Mean0(r()),
    [(2, 6)],
    False,
    "couples samples: h - h.mean(0) over the batch, exported at batch 2",
    {"x": "B,6"},
    ["x"],
    extra="old_batch = 2",
    note=", static batch 2",
)
export(
    "jx_softmax0_sym",
    Soft0(r()),
    [("B", 6)],
    False,
    "couples samples: softmax over axis 0 (the batch)",
    {"x": "B,6"},
    ["x"],
    note=", symbolic batch 'B'",
)
export(
    "jx_softmax0_b1",
    Soft0(r()),
    [(1, 6)],
    False,
    "couples samples: softmax over axis 0 (the batch), at batch 1 (all ones)",
    {"x": "B,6"},
    ["x"],
    note=", static batch 1",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "jax.json").write_text(json.dumps(meta, indent=1))
