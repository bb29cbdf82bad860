"""Models from another tool's test suite: the onnx wheel's own backend test models.

They are old (IR 3, opset 1 to 9) and odd (initializers listed as graph inputs, kernels onnxruntime
no longer has), which is what a user's model from the wild looks like. The onnx wheel ships them,
so the suite needs nothing more. No command may exit 5 (a bug) on any of them; the "light" zoo models
(resnet50, densenet121, ...) must re-batch and verify per sample.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import onnx
import pytest

from helpers import write_spec
from patchspec.cli import main

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted((DATA / "light").glob("light_*.onnx"))
ALL = sorted(
    {
        *LIGHT,
        *DATA.glob("simple/*/model.onnx"),
        *DATA.glob("pytorch-converted/*/model.onnx"),
        *DATA.glob("pytorch-operator/*/model.onnx"),
    }
)


#: the models lie outside each test's folder (site-packages, the corpus): the runs name the root
pytestmark = pytest.mark.usefixtures("models_outside_the_project")


def patchspec(*args) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue() + err.getvalue()


def model_id(path: Path) -> str:
    return path.stem if path.parent.name == "light" else f"{path.parent.parent.name}/{path.parent.name}"


def test_the_wheel_ships_the_models():
    assert len(LIGHT) >= 8 and len(ALL) >= 100, f"onnx {onnx.__version__} ships {len(ALL)} backend test models"


@pytest.mark.parametrize("model", ALL, ids=model_id)
def test_no_command_is_a_bug_on_any_of_them(model, tmp_path):
    codes = {}
    for size, verify in ((4, "verify:\n  - check: {}\n  - lint: {}\n"), ("N", None)):
        spec = write_spec(
            tmp_path,
            f"patchspec: 1\nmodel: {model}\noutput: out_{size}.onnx\npatches:\n"
            f"  - set_batch: {size}\n" + (verify or ""),
            name=f"s_{size}.yaml",
        )
        codes[size], text = patchspec("apply", spec, *([] if verify else ["--no-verify"]))
        assert codes[size] != 5, text
    code, text = patchspec("inspect", model)
    assert code != 5, text


@pytest.mark.parametrize("model", [m for m in LIGHT if "vgg19" not in m.name], ids=model_id)  # vgg19: 12 s
def test_the_light_zoo_models_rebatch_and_match_per_sample(model, tmp_path):
    """IR 3 models: every initializer is also a graph input, and so must be any a patch adds."""
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {model}\noutput: out.onnx\npatches:\n  - set_batch: 4\n"
        "verify:\n  - check: {}\n  - run:\n      compare: {split_batch: true}\n",
    )
    code, text = patchspec("apply", spec)
    assert code == 0, text
    written = onnx.load(tmp_path / "out.onnx")
    inputs = {info.name for info in written.graph.input}
    if written.ir_version < 4:
        assert {t.name for t in written.graph.initializer} <= inputs
