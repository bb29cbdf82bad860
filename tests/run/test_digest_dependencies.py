"""Files a verifier reads are part of the output's digest and of the depfile."""

import numpy as np
import onnx
from onnx import helper

from helpers import graph_model, tensor_info, write_spec

SPEC = """\
patchspec: 1
model: m.onnx
output: out/m2.onnx
patches: []
verify:
  - run:
      cases:
        - inputs: {x: {file: x.npy}}
      compare: {against: ref.npz}
"""


def _setup(tmp_path, reference_scale: float):
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2, 3])], [tensor_info("y", [2, 3])]
    )
    onnx.save(model, tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "ref.npz", y=np.maximum(x, 0) * reference_scale)
    return write_spec(tmp_path, SPEC)


def test_changed_reference_file_makes_apply_verify_again(tmp_path, run_cli):
    spec = _setup(tmp_path, 1.0)
    assert run_cli("apply", spec).exit_code == 0
    assert "up to date" in run_cli("apply", spec).stdout
    np.savez(tmp_path / "ref.npz", y=np.full((2, 3), 7.0, np.float32))  # a wrong reference now
    again = run_cli("apply", spec)
    assert again.exit_code == 1, again.output
    assert "up to date" not in again.stdout


def test_depfile_lists_verifier_inputs(tmp_path, run_cli):
    spec = _setup(tmp_path, 1.0)
    depfile = tmp_path / "out.d"
    result = run_cli("apply", spec, "--depfile", depfile)
    assert result.exit_code == 0, result.output
    text = depfile.read_text()
    assert "x.npy" in text and "ref.npz" in text and "m.onnx" in text


def test_two_checkouts_at_different_folders_build_identical_bytes(tmp_path, run_cli):
    """Issue 11: the digest stamped in the output hashed the verifier files' absolute paths."""
    outputs = []
    for checkout in ("clone_a", "somewhere/else/clone_b"):
        folder = tmp_path / checkout
        folder.mkdir(parents=True)
        spec = _setup(folder, 1.0)
        result = run_cli("apply", spec, cwd=folder)
        assert result.exit_code == 0, result.output
        outputs.append((folder / "out" / "m2.onnx").read_bytes())
    assert outputs[0] == outputs[1]


def test_delete_and_rebuild_gives_identical_bytes(tmp_path, run_cli):
    spec = _setup(tmp_path, 1.0)
    assert run_cli("apply", spec).exit_code == 0
    first = (tmp_path / "out" / "m2.onnx").read_bytes()
    (tmp_path / "out" / "m2.onnx").unlink()
    assert run_cli("apply", spec).exit_code == 0
    assert (tmp_path / "out" / "m2.onnx").read_bytes() == first
