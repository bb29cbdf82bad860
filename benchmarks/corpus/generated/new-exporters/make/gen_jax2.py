"""new-exporters jax2onnx models, second set: lax.scan RNN, argsort, vmap over fori_loop. Pins: jax==0.10.2 flax==0.12.8 jax2onnx==0.17.1."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import onnx
from jax import lax
from jax2onnx import to_onnx

OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
EXP = "jax2onnx 0.17.1 (jax 0.10.2, opset 23)"
meta = []
k = jax.random.split(jax.random.key(0), 4)
Wx = jax.random.normal(k[0], (5, 6)) * 0.4
Wh = jax.random.normal(k[1], (6, 6)) * 0.4
Wo = jax.random.normal(k[2], (6, 3)) * 0.4


def export(key, fn, shapes, batchable, why, inputs, note, extra=""):
    try:
        m = to_onnx(fn, shapes, model_name=key, input_names=list(inputs))
        onnx.save(m, f"{OUT}/{key}.onnx")
        meta.append(dict(key=key, exporter=EXP + note, batchable=batchable, why=why, inputs=inputs, extra=extra))
        print(
            "ok",
            key,
            sorted({n.op_type for n in m.graph.node}),
            [(i.name, [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]) for i in m.graph.output],
        )
    except Exception as e:
        print("FAIL", key, type(e).__name__, str(e)[:400])


def rnn(x):  # x [B, T, 5]; lax.scan over time with the batch in the carry
    h0 = jnp.zeros((x.shape[0], 6))

    def step(h, xt):
        h = jnp.tanh(xt @ Wx + h @ Wh)
        return h, h

    hT, hs = lax.scan(step, h0, jnp.swapaxes(x, 0, 1))
    return hT @ Wo, jnp.swapaxes(hs, 0, 1)


def argsort_take(x):  # per-sample argsort and take_along_axis
    i = jnp.argsort(x, axis=-1)
    return jnp.take_along_axis(x * 2.0, i, axis=-1)[:, :3]


def vmap_fori(x):  # per-sample fixed-point iteration via fori_loop, vmapped
    def one(v):
        return lax.fori_loop(0, 3, lambda i, a: jnp.tanh(a @ Wh + v), jnp.zeros(6))

    return jax.vmap(one)(x)


def scan_batch(x):  # control: lax.scan over the batch with a running state
    def step(c, xb):
        c = c + xb
        return c, c * 1.0

    return lax.scan(step, jnp.zeros(6), x)[1]


for b, tag, note in ((1, "b1", ", static batch 1"), ("B", "sym", ", symbolic batch 'B'")):
    export(
        f"jx_scan_rnn_{tag}",
        rnn,
        [(b, 4, 5)],
        True,
        "RNN written with lax.scan over time: carry h0 = zeros((x.shape[0], 6)), swapaxes to time-major; outputs hT @ Wo [B,3] and hs [B,4,6]",
        {"x": "B,4,5"},
        note,
    )
export(
    "jx_argsort_b1",
    argsort_take,
    [(1, 7)],
    True,
    "jnp.argsort over the last axis, take_along_axis of 2x by the order, first 3",
    {"x": "B,7"},
    ", static batch 1",
)
export(
    "jx_vmap_fori_b1",
    vmap_fori,
    [(1, 6)],
    True,
    "jax.vmap of a per-sample lax.fori_loop(0, 3) fixed-point iteration",
    {"x": "B,6"},
    ", static batch 1",
)
export(
    "jx_scan_over_batch_b1",
    scan_batch,
    [(1, 6)],
    False,
    "couples samples: lax.scan over the batch axis with a running sum carry (cumulative sum across samples)",
    {"x": "B,6"},
    ", static batch 1",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "jax2.json").write_text(json.dumps(meta, indent=1))
