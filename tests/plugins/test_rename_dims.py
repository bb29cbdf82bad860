"""rename_dims: targets, actions, pins that survive set_batch, and the naive SCRFD repair."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.api import PINNED_DIMS, read_dims
from patchspec.errors import PatchError
from patchspec.testing import patch_context
from patchspec_plugins.rename_dims import RenameDimsPatch
from scrfd_like import fpn_model


def rename(model, context=None, **params):
    return RenameDimsPatch().apply(model, params, context or patch_context("rename_dims", params))


def run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def declared_vs_actual(model, feeds):
    """(tensor, declared, actual) for every input, output and value_info, run in ONNX Runtime."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(vi for vi in probe.graph.value_info if vi.name not in outputs)
    results = dict(zip([o.name for o in probe.graph.output], run(probe, feeds)))
    for info in [*probe.graph.input, *probe.graph.output]:
        actual = feeds[info.name].shape if info.name in feeds else results[info.name].shape
        yield info.name, read_dims(info), actual


def assert_no_shape_lies(model, feeds):
    sizes = {}
    for name, declared, actual in declared_vs_actual(model, feeds):
        for want, got in zip(declared or [], actual):
            if isinstance(want, int):
                assert want == got, f"{name} declares {declared}, is {list(actual)}"
            elif isinstance(want, str):
                sizes.setdefault(want, set()).add(got)
    shared = {name: found for name, found in sizes.items() if len(found) > 1}
    assert not shared, f"dim_params bound to different sizes: {shared}"


def per_sample(model, name, x):
    runs = [run(model, {name: x[i : i + 1]}) for i in range(len(x))]
    return [np.concatenate(parts) for parts in zip(*runs)]


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


# -- the naive batch-32 SCRFD model ----------------------------------------------------------------------
def test_unique_alone_repairs_the_naive_batch_32_fpn():
    naive = fpn_model(spatial="?", batch=32)  # every 4-D annotation [32, C, '?', '?']
    x = rand(32, 3, 64, 96)
    with pytest.raises(Exception, match="Shape mismatch attempting to re-use buffer"):
        run(naive, {"input.1": x})
    result = rename(naive, unique=True)
    assert result.modified
    assert read_dims(naive.graph.input[0]) == [32, 3, "input.1_dim2", "input.1_dim3"]
    reference = fpn_model(spatial=None, batch=None, annotate=False)
    for got, want in zip(run(naive, {"input.1": x}), per_sample(reference, "input.1", x[:32])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert_no_shape_lies(naive, {"input.1": x})


def test_the_lie_check_catches_the_naive_model():
    naive = fpn_model(spatial="?", batch=32, annotate=False)  # outputs only: runs, but declares '?' thrice
    with pytest.raises(AssertionError, match="different sizes"):
        assert_no_shape_lies(naive, {"input.1": rand(32, 3, 64, 64)})


# -- targets and actions --------------------------------------------------------------------------------------
def test_tensor_axes_rename_input_and_propagate():
    model = fpn_model(spatial="?", batch=4)
    context = patch_context("rename_dims")
    result = rename(model, context, tensor="input.1", axes={2: "height", 3: "width"})
    assert read_dims(model.graph.input[0]) == [4, 3, "height", "width"]
    assert "re-derived" in result.summary
    assert context.state.get(PINNED_DIMS) == {"input.1": {2: "height", 3: "width"}}
    assert all("?" not in (read_dims(vi) or []) for vi in model.graph.value_info)
    assert_no_shape_lies(model, {"input.1": rand(4, 3, 64, 96)})


def test_map_on_the_whole_model():
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", ["p2o.0", 3])], [tensor_info("y", ["p2o.0", 3])]
    )
    rename(model, map={"p2o.0": "batch"})
    assert read_dims(model.graph.input[0]) == ["batch", 3] and read_dims(model.graph.output[0]) == ["batch", 3]


def test_map_of_unknown_name_fails_with_close_match():
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", ["batch", 3])], [tensor_info("y", ["batch", 3])]
    )
    with pytest.raises(PatchError, match="did you mean 'batch'"):
        rename(model, map={"bacth": "N"})


def test_unknown_tensor_pattern_fails_with_close_matches():
    with pytest.raises(PatchError) as caught:
        rename(fpn_model(), tensor="input.2", axes={0: "N"})
    assert "input.1" in str(caught.value)


def test_regex_and_glob_patterns_and_unannotated_intermediates():
    model = fpn_model(spatial=None, batch=2, annotate=False)
    rename(model, tensor=["re:/lat\\.[01]/Conv_output_0", "out*"], axes={0: 2})
    annotated = {vi.name for vi in model.graph.value_info}
    assert {"/lat.0/Conv_output_0", "/lat.1/Conv_output_0"} <= annotated
    assert all(read_dims(o)[0] == 2 for o in model.graph.output)


def test_axis_out_of_range_fails():
    with pytest.raises(PatchError, match="axis 5"):
        rename(fpn_model(), tensor="input.1", axes={5: "N"})


def test_no_op_leaves_bytes_identical():
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", ["N", 3])], [tensor_info("y", ["N", 3])]
    )
    before = model.SerializeToString()
    assert not rename(model, map={"N": "N"}).modified
    assert not rename(model, tensor="x", axes={1: 3}).modified
    assert model.SerializeToString() == before


# -- through the command line: select + pins that survive set_batch ----------------------------------------------
def test_select_names_one_fpn_level_and_survives_set_batch(tmp_path, run_cli):
    onnx.save(fpn_model(spatial="?", batch="?"), tmp_path / "fpn.onnx")
    spec = write_spec(
        tmp_path,
        """patchspec: 1
model: fpn.onnx
output: out/fpn_b4.onnx
patches:
  - rename_dims:
      tensor: input.1
      axes: {2: height, 3: width}
  - rename_dims:
      select: {op_type: [Add, Relu], after: /lat.1/Conv_output_0, before: out1, expect: 2}
      axes: {2: h16, 3: w16}
  - set_batch: 4
verify:
  - check: {}
""",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    model = onnx.load(str(tmp_path / "out" / "fpn_b4.onnx"))
    dims = {info.name: read_dims(info) for info in [*model.graph.value_info, *model.graph.output]}
    assert dims["out1"] == [4, 4, "h16", "w16"] and dims["/fpn.1/Add_output_0"] == [4, 4, "h16", "w16"]
    assert read_dims(model.graph.input[0]) == [4, 3, "height", "width"]
    x = rand(4, 3, 64, 96)
    assert_no_shape_lies(model, {"input.1": x})
    reference = fpn_model(spatial=None, batch=None, annotate=False)
    for got, want in zip(run(model, {"input.1": x}), per_sample(reference, "input.1", x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "params, message",
    [
        ("{axes: {0: N}}", "needs a target"),
        ("{tensor: x, select: {op_type: Relu}, unique: true}", "not both"),
        ("{tensor: x}", "nothing to do"),
        ("{tensor: 're:(', unique: true}", "invalid regular expression"),
        ("{select: {op_typo: Relu}, unique: true}", "op_type"),
        ("{map: {1: N}}", "dim_params"),
    ],
)
def test_bad_params_are_spec_errors(params, message, tmp_path, run_cli):
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - rename_dims: {params}\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert message in result.output
