import onnx
from onnx import helper

from helpers import graph_model, tensor_info, write_spec


def test_apply_writes_output_then_reports_up_to_date(tmp_path, run_cli):
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 3])], [tensor_info("y", [1, 3])])
    onnx.save(model, tmp_path / "m.onnx")
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n")
    first = run_cli("apply", spec)
    assert first.exit_code == 0, first.output
    assert (tmp_path / "out" / "m2.onnx").is_file()
    second = run_cli("apply", spec)
    assert second.exit_code == 0
    assert "up to date" in second.stdout


def test_python_dash_m_patchspec_is_the_same_command_line():
    import subprocess
    import sys

    import patchspec

    done = subprocess.run([sys.executable, "-m", "patchspec", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and patchspec.__version__ in done.stdout, done.stderr
