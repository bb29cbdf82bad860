import onnx
from onnx import helper

from helpers import graph_model, tensor_info, write_spec


def test_apply_writes_output_then_reports_up_to_date(tmp_path, run_cli):
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, 3])], [tensor_info("y", [1, 3])]
    )
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


def test_env_plan_and_validate_print_json_when_asked(tmp_path, run_cli):
    import json

    import onnx

    from patchspec.testing import make_model

    env = json.loads(run_cli("env", "--json").stdout)
    assert env["onnx"]["version"] == onnx.__version__ and "CPUExecutionProvider" in env["onnxruntime"]["providers"]
    onnx.save(make_model({"x": ("N", 3)}), tmp_path / "m.onnx")
    (tmp_path / "good.yaml").write_text("patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: [{set_batch: 2}]\n")
    (tmp_path / "bad.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches: [{set_batch: {sise: 2}}]\n"
    )
    plan = json.loads(run_cli("plan", "--json", tmp_path / "good.yaml").stdout)
    assert plan["status"] == "planned" and plan["patches"][0]["status"] == "modified"
    assert not (tmp_path / "o.onnx").exists()
    result = run_cli("validate", "--json", tmp_path / "bad.yaml", tmp_path / "good.yaml")
    checked = json.loads(result.stdout)["specs"]
    assert result.exit_code == 2 and [s["ok"] for s in checked] == [False, True]
    # each problem is data: the place, the key inside the step, the message and the hint apart
    (problem,) = [p for p in checked[0]["problems"] if "did you mean 'size'" in p["message"] + str(p["hint"])]
    assert problem["file"].endswith("bad.yaml") and problem["line"] == 4 and problem["column"] > 1


def test_validate_json_gives_the_step_and_the_key_apart(tmp_path, run_cli):
    """Issue 35: "key" was [] and the params path folded into "where", as docs/cli.md says it is not."""
    import json

    import onnx

    from patchspec.testing import make_model

    onnx.save(make_model({"x": ("N", 3)}), tmp_path / "m.onnx")
    (tmp_path / "bad.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n"
        "  - rename_dims: {tensor: x, axes: {0: 12.5}}\n  - set_batch: {size: 2, inputz: [x]}\n"
    )
    problems = json.loads(run_cli("validate", "--json", tmp_path / "bad.yaml").stdout)["specs"][0]["problems"]
    places = sorted((p["where"], tuple(p["key"])) for p in problems)
    assert places == [("patches[0] (rename_dims)", ("axes", 0)), ("patches[1] (set_batch)", ())], problems
    text = run_cli("validate", tmp_path / "bad.yaml").stderr
    assert "patches[0] (rename_dims) > axes.0: 12.5 is not of type" in text, text
