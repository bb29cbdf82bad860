"""What the set_batch tests share: the patch run in-process, ONNX Runtime runs, per-sample references."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from patchspec.shapes.annotations import read_dims
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run(model, feeds):
    return session(model).run(None, feeds)


def per_sample(model, feeds, batched):
    """Run ``model`` once per sample of the ``batched`` inputs' axis 0; join the outputs on axis 0."""
    count = len(next(iter(feeds[name] for name in batched)))
    runs = [run(model, {k: (v[i : i + 1] if k in batched else v) for k, v in feeds.items()}) for i in range(count)]
    return [np.concatenate(parts) for parts in zip(*runs)]


def assert_declared_shapes_hold(model, feeds, ignore_params=()):
    """Every annotated tensor (outputs and value_info): fixed dims equal, one size per dim_param."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(vi for vi in probe.graph.value_info if vi.name not in outputs)
    names = [o.name for o in probe.graph.output]
    results = dict(zip(names, run(probe, feeds)))
    sizes = {}
    for info in [*probe.graph.input, *probe.graph.output]:
        actual = feeds[info.name].shape if info.name in feeds else results[info.name].shape
        declared = read_dims(info)
        assert declared is None or len(declared) == len(actual), (info.name, declared, actual)
        for want, got in zip(declared or [], actual):
            if isinstance(want, int):
                assert want == got, f"{info.name} declares {declared}, is {list(actual)}"
            elif isinstance(want, str) and want not in ignore_params:
                sizes.setdefault(want, set()).add(got)
    shared = {name: found for name, found in sizes.items() if len(found) > 1}
    assert not shared, f"dim_params bound to different sizes: {shared}"


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def const(name, values):
    """An int64 initializer: a shape, a Slice's bounds."""
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)
