"""The providers table of docs/providers.md, measured: torchvision's resnet18, a 2-layer
TransformerEncoder and the demo's SCRFD-like detector, re-batched and verified on
[CPUExecutionProvider, CUDAExecutionProvider] by `patchspec apply`, with exact math (the default)
and with TF32 kept on (``provider_options: {CUDAExecutionProvider: {use_tf32: 1}}``, the measured floor).

Needs torch and torchvision (the GPU image has them; random weights, nothing downloaded).
usage: python3 benchmarks/gpu/table_on_cuda.py --out table.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CUDA = "CUDAExecutionProvider"


def export_torch(work: Path) -> dict[str, tuple[Path, str, list[int], int]]:
    """name -> (model, input name, input shape at the batch, batch); TorchScript exporter, batch dynamic."""
    import torch
    import torchvision

    torch.manual_seed(0)
    made = {}
    resnet = torchvision.models.resnet18(weights=None).eval()
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True, dropout=0.0),
        num_layers=2,
        enable_nested_tensor=False,
    ).eval()
    for name, module, shape in (("resnet18", resnet, [3, 224, 224]), ("transformer_encoder", encoder, [32, 128])):
        path = work / f"{name}.onnx"
        example = torch.randn(1, *shape)
        torch.onnx.export(
            module,
            (example,),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
        made[name] = (path, "x", [8, *shape], 8)
    return made


def scrfd(work: Path) -> tuple[Path, str, list[int], int]:
    path = work / "scrfd_like.onnx"
    subprocess.run([sys.executable, str(REPO / "examples" / "scrfd" / "make_scrfd.py"), str(path)], check=True)
    return path, "input.1", [32, 3, 320, 320], 32


def spec(model: Path, name: str, shape: list[int], batch: int, fast: bool) -> str:
    options = f"      provider_options: {{{CUDA}: {{use_tf32: 1}}}}\n" if fast else ""
    return (
        f"patchspec: 1\nmodel: {model.name}\noutput: {model.stem}_{'fast' if fast else 'exact'}.onnx\n"
        f"patches:\n  - set_batch: {batch}\nverify:\n  - run:\n"
        f"      providers: [CPUExecutionProvider, {CUDA}]\n      require: [{CUDA}]\n{options}"
        f"      cases:\n        - inputs: {{{json.dumps(name)}: {shape}}}\n"
        f"      compare: {{against: original, split_batch: true, rtol: 1.0e-4, atol: 1.0e-5}}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("table_on_cuda.json"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/table-on-cuda"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    models = {"scrfd_like_b32_320": scrfd(args.work)}
    try:
        models.update(export_torch(args.work))
    except Exception as error:
        print(f"torch export skipped: {type(error).__name__}: {error}")
    rows: list[dict[str, Any]] = []
    for key, (model, name, shape, batch) in models.items():
        for fast in (False, True):
            math = "fast" if fast else "exact"
            spec_file = args.work / f"{key}_{math}.yaml"
            spec_file.write_text(spec(model, name, shape, batch, fast))
            report = args.work / f"{key}_{math}.json"
            done = subprocess.run(
                [sys.executable, "-m", "patchspec", "apply", spec_file.name, "--force", "--report", report.name],
                cwd=args.work,
                capture_output=True,
                text=True,
            )
            verifiers = json.loads(report.read_text()).get("verifiers", []) if report.is_file() else []
            details = [line for v in verifiers for line in v.get("details", []) if CUDA in line or "floor" in line]
            summary = verifiers[0]["summary"] if verifiers else (done.stdout + done.stderr)[-600:]
            rows.append({"model": key, "math": math, "exit": done.returncode, "summary": summary, "details": details})
            print(f"{key:24} {math:5} exit {done.returncode}: {summary[:300]}", flush=True)
            for line in details[:12]:
                print(f"    {line[:220]}")
            args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
