"""The peers venv, ``benchmarks/.peers-venv``: created and filled when missing, or read as it is (``--quick``)."""

from __future__ import annotations

import json
import sys

from peers.calls import PEERS_PY, PEERS_VENV, REPO, SCRIPT, Json, first_error_line, run_child


def pip_install(*requirements: str) -> Json:
    done = run_child([str(PEERS_PY), "-m", "pip", "install", "-q", *requirements], 900)
    if done["rc"] == 0:
        return {"status": "installed"}
    reason = "timed out" if done["rc"] is None else first_error_line(done["output"])
    return {"status": "not installable", "reason": reason}


def ensure_peers_venv() -> Json:
    """Create benchmarks/.peers-venv when missing and install the peers; {tool: {status, package?, reason?}}."""
    if not PEERS_PY.exists():
        print(f"creating {PEERS_VENV.relative_to(REPO)}", file=sys.stderr, flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        made = run_child([base, "-m", "venv", str(PEERS_VENV)], 600)
        if made["rc"] != 0 or not PEERS_PY.exists():
            reason = {"status": "not installable", "reason": "venv: " + first_error_line(made["output"])}
            return {name: dict(reason) for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy")} | {
                "onnxsim": {**reason, "package": "onnxsim"}
            }
        (PEERS_VENV / ".gitignore").write_text("*\n")  # keep the venv out of `git status`
        run_child([str(PEERS_PY), "-m", "pip", "install", "-q", "--upgrade", "pip"], 600)
    print("installing the peers into benchmarks/.peers-venv (pip)", file=sys.stderr, flush=True)
    tools = {}
    base = pip_install("onnx", "onnxruntime", "numpy", "sympy")
    for name in ("onnx", "onnxruntime", "numpy", "sympy"):
        tools[name] = base if base["status"] == "installed" else pip_install(name)
    # `polygraphy surgeon` needs onnx-graphsurgeon; --fold-constants uses onnxruntime
    tools["polygraphy"] = pip_install("polygraphy", "onnx-graphsurgeon")
    tools["onnxsim"] = {**pip_install("onnxsim"), "package": "onnxsim"}
    if tools["onnxsim"]["status"] != "installed":
        tried = tools["onnxsim"]["reason"]
        tools["onnxsim"] = {**pip_install("onnxslim"), "package": "onnxslim", "onnxsim": f"not installable: {tried}"}
    return tools


def installed_peers() -> Json:
    """--quick installs nothing: what benchmarks/.peers-venv already holds; every tool ``skipped`` without it."""
    venv = PEERS_VENV.relative_to(REPO)
    if not PEERS_PY.exists():
        skipped = {
            "status": "skipped",
            "reason": f"{venv} does not exist and --quick installs nothing (a full run creates it)",
        }
        tools = {name: dict(skipped) for name in ("onnx", "onnxruntime", "numpy", "sympy", "polygraphy")}
        return {**tools, "onnxsim": {**skipped, "package": "onnxsim"}}
    done = run_child([str(PEERS_PY), str(SCRIPT), "--versions"], 120, cwd=REPO)
    found = json.loads(done["stdout"].strip().splitlines()[-1]) if done["rc"] == 0 and done["stdout"].strip() else {}

    def status(*packages: str) -> Json:
        absent = [name for name in packages if name not in found]
        if not absent:
            return {"status": "installed"}
        return {"status": "not installable", "reason": f"not in {venv}: {', '.join(absent)} (--quick installs nothing)"}

    tools = {name: status(name) for name in ("onnx", "onnxruntime", "numpy", "sympy")}
    tools["polygraphy"] = status("polygraphy", "onnx_graphsurgeon")
    package = "onnxslim" if "onnxslim" in found and "onnxsim" not in found else "onnxsim"
    tools["onnxsim"] = {**status(package), "package": package}
    return tools
