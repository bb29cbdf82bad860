"""examples/build-systems/bazel built by Bazel, as a user would (`make test-bazel`; skipped where
bazel is not installed): both models are built and verified in the sandbox, with patchspec's own
bytes and no path in them; the BUILD file declares every file patchspec reads; a second clone at
another path sharing the --disk_cache runs no action and gets byte-identical files; a spec edit
re-runs its action only; a broken spec, a failing verifier, an undeclared input and an undeclared
output data file fail the build with a message that says so; strict_paths builds. The timings of the cold and the cached
build are printed (`pytest -s`); PATCHSPEC_BAZEL_WEIGHTS_MIB=256 makes the linear model's weight
256 MiB (make_models.py --weights-mib)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from patchspec.shapes.annotations import read_dims

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "build-systems" / "bazel"
BIN = Path(sys.executable).parent
OUTPUTS = ("linear_b4.onnx", "linear_b4.onnx.data", "scale_b2.onnx")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("bazel") is None,
        reason="bazel is not installed (make test-bazel installs it as root: apt-get install bazel-bootstrap)",
    ),
]


class Clone:
    """A copy of the example at its own path, with its own Bazel output base (and server)."""

    def __init__(self, root: Path, cache: Path):
        self.folder = root / "bazel"
        self.output_base = root / "output-base"
        self.cache = cache
        shutil.copytree(
            EXAMPLE, self.folder, ignore=shutil.ignore_patterns("bazel-*", "models", "data", "build", "patchspec-bazel")
        )
        (self.folder / ".git").mkdir()  # a checkout: its top is the project root (docs/security.md)
        weights = os.environ.get("PATCHSPEC_BAZEL_WEIGHTS_MIB")
        run([sys.executable, "make_models.py", *(["--weights-mib", weights] if weights else [])], self.folder)
        (self.folder / "patchspec-bazel").symlink_to(run([str(BIN / "patchspec"), "bazel-path"], self.folder).strip())

    def bazel(self, command: str, *args: str, ok: bool = True) -> str:
        startup = [f"--output_base={self.output_base}", "--nohome_rc"]
        flags = [f"--disk_cache={self.cache}", "--color=no", "--curses=no"] if command == "build" else []
        return run(["bazel", *startup, command, *flags, *args], self.folder, ok=ok)

    def build(self, *targets: str, ok: bool = True) -> str:
        return self.bazel("build", *(targets or ("//:models",)), ok=ok)

    def output(self, name: str) -> bytes:
        return (self.folder / "bazel-bin" / name).read_bytes()


def run(args, cwd: Path, ok: bool = True) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PATCHSPEC", None)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert (done.returncode == 0) == ok, f"{' '.join(map(str, args))}: exit {done.returncode}\n{output}"
    return output


def processes(output: str) -> dict[str, int]:
    """Bazel's 'INFO: 3 processes: 1 internal, 2 linux-sandbox.' as {'internal': 1, 'linux-sandbox': 2}."""
    (line,) = re.findall(r"INFO: \d+ process(?:es)?: (.*)\.$", output, flags=re.M)
    return {kind: int(count) for count, kind in (part.split(" ", 1) for part in line.split(", "))}


def sandboxed(counts: dict[str, int]) -> int:
    return sum(n for kind, n in counts.items() if kind.endswith("sandbox"))


def cache_hits(counts: dict[str, int]) -> int:
    """Bazel 4 counts a --disk_cache hit as a 'remote cache hit', later versions as a 'disk cache hit'."""
    return counts.get("disk cache hit", 0) + counts.get("remote cache hit", 0)


@pytest.fixture(scope="module")
def clones(tmp_path_factory):
    """Clone a builds cold, then clone b, at another path, from the disk cache a filled; timed."""
    root = tmp_path_factory.mktemp("bazel")
    a, b = Clone(root / "a", root / "disk-cache"), Clone(root / "b", root / "disk-cache")
    timings = {}
    try:
        for name, clone in (("a", a), ("b", b)):
            clone.bazel("info", "output_base")  # the server is up: what is timed is the build
            start = time.perf_counter()
            output = clone.build()
            timings[name] = (time.perf_counter() - start, output)
        yield a, b, timings
    finally:
        for clone in (a, b):
            if clone.output_base.exists():
                run(["bazel", f"--output_base={clone.output_base}", "--nohome_rc", "shutdown"], clone.folder, ok=True)


def test_both_models_are_built_and_verified_in_the_sandbox(clones):
    a, _, timings = clones
    counts = processes(timings["a"][1])
    assert sandboxed(counts) == 2 and "local" not in counts, timings["a"][1]
    linear = onnx.load(str(a.folder / "bazel-bin" / "linear_b4.onnx"), load_external_data=False)
    scale = onnx.load(str(a.folder / "bazel-bin" / "scale_b2.onnx"), load_external_data=False)
    (_, k) = read_dims(onnx.load(str(a.folder / "models" / "linear.onnx"), load_external_data=False).graph.input[0])
    assert read_dims(linear.graph.input[0]) == [4, k] and read_dims(scale.graph.input[0]) == [2, 8]
    assert linear.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    assert a.output("linear_b4.onnx.data") == (a.folder / "models" / "linear.onnx.data").read_bytes()


def test_outputs_are_patchspecs_own_bytes_with_no_path_in_them(clones, tmp_path):
    a, b, _ = clones
    plain = tmp_path / "plain"
    for spec in ("linear_b4", "scale_b2"):
        run(
            [str(BIN / "patchspec"), "-q", "apply", f"specs/{spec}.yaml", "--output", str(plain / f"{spec}.onnx")],
            a.folder,
        )
    output_base = a.bazel("info", "output_base").strip()
    for name in OUTPUTS:
        data = a.output(name)
        assert data == (plain / name).read_bytes(), f"{name}: Bazel's bytes differ from `patchspec apply`'s"
        for path in (str(a.folder), str(b.folder), output_base, str(tmp_path), "execroot", "sandbox"):
            assert path.encode() not in data, f"{name} holds {path}"


def test_the_build_declares_every_file_patchspec_reads(clones, tmp_path):
    """patchspec's depfile names what it reads; Bazel's query, what the rule declares."""
    a, _, _ = clones
    for spec in ("linear_b4", "scale_b2"):
        depfile = tmp_path / f"{spec}.d"
        run(
            [
                str(BIN / "patchspec"),
                "-q",
                "apply",
                f"specs/{spec}.yaml",
                "--output",
                str(tmp_path / f"{spec}.onnx"),
                "--depfile",
                str(depfile),
            ],
            a.folder,
        )
        read = set(depfile.read_text().split(": ", 1)[1].split())
        query = a.bazel("query", f'kind("source file", deps(//:{spec})) except deps(@patchspec_tool//:patchspec)')
        declared = {line.removeprefix("//:") for line in query.splitlines() if line.startswith("//:")}
        assert read == declared, f"{spec}: patchspec reads {sorted(read)}, //:{spec} declares {sorted(declared)}"


def test_a_second_clone_runs_no_action_and_gets_the_same_bytes(clones):
    a, b, timings = clones
    counts = processes(timings["b"][1])
    assert sandboxed(counts) == 0 and cache_hits(counts) == 2, timings["b"][1]
    for name in OUTPUTS:
        assert b.output(name) == a.output(name), name
    for name, what in (("a", "cold"), ("b", "a second clone, from the disk cache")):
        seconds, output = timings[name]
        bazel = re.search(r"Elapsed time: .*", output).group(0)
        print(f"\nbazel build //:models, {what}: {seconds:.2f} s ({bazel}; {processes(output)})", end="")


def test_a_spec_edit_reruns_its_action_only(clones):
    _, b, _ = clones
    spec = b.folder / "specs" / "scale_b2.yaml"
    text = spec.read_text()
    before = b.output("scale_b2.onnx")
    try:
        spec.write_text(text + "# reviewed again\n")
        counts = processes(b.build())
        assert sandboxed(counts) == 1 and cache_hits(counts) == 0, counts
        assert b.output("scale_b2.onnx") != before  # the spec's text is in the digest the output carries
    finally:
        spec.write_text(text)


def test_a_broken_spec_fails_the_build_with_patchspecs_message(clones):
    _, b, _ = clones
    spec = b.folder / "specs" / "linear_b4.yaml"
    text = spec.read_text()
    try:
        spec.write_text(text.replace("set_batch: 4", "set_bach: 4"))
        output = b.build("//:linear_b4", ok=False)
        assert re.search(
            r"^specs/linear_b4.yaml:\d+:\d+: patches\[0\]: unknown patch type 'set_bach' \(did you mean 'set_batch'\?\)$",
            output,
            flags=re.M,
        ), output
    finally:
        spec.write_text(text)


def test_an_undeclared_input_fails_the_build(clones):
    """The sandbox holds the declared inputs only; the source tree behind its links is not read."""
    _, b, _ = clones
    build = b.folder / "BUILD.bazel"
    text = build.read_text()
    try:
        build.write_text(text.replace('"data/x_b2.npy",', ""))
        output = b.build("//:scale_b2", ok=False)
        assert "../data/x_b2.npy does not exist" in output, output
    finally:
        build.write_text(text)


def test_an_undeclared_output_data_file_fails_the_build(clones):
    _, b, _ = clones
    build = b.folder / "BUILD.bazel"
    text = build.read_text()
    try:
        build.write_text(text.replace('out_data = ["linear_b4.onnx.data"],', ""))
        output = b.build("//:linear_b4", ok=False)
        assert re.search(
            r"//:linear_b4: patchspec wrote \S+/linear_b4.onnx \S+/linear_b4.onnx.data; the rule declares \S+/linear_b4.onnx$",
            output,
            flags=re.M,
        ), output
    finally:
        build.write_text(text)


def test_strict_paths_builds_on_copies_of_the_model_and_its_data(clones):
    """--strict-paths refuses data reached through a link, and the sandbox's inputs are all links."""
    a, _, _ = clones
    build = a.folder / "BUILD.bazel"
    text = build.read_text()
    try:
        build.write_text(
            text.replace(
                'out_data = ["linear_b4.onnx.data"],', 'out_data = ["linear_b4.onnx.data"],\n    strict_paths = True,'
            )
        )
        assert sandboxed(processes(a.build("//:linear_b4"))) == 1
    finally:
        build.write_text(text)


def test_a_failing_verifier_fails_the_build(clones):
    """The expected output changes (x * 3 where the model computes x * 2): the action re-runs, fails."""
    _, b, _ = clones
    expected = b.folder / "data" / "y_b2.npz"
    before = expected.read_bytes()
    try:
        with np.load(expected) as arrays:
            np.savez(expected, y=arrays["y"] / 2 * 3)
        output = b.build("//:scale_b2", ok=False)
        assert re.search(
            r"^specs/scale_b2.yaml:\d+:\d+: verify\[1\] \(run\): verification failed: .* expected 11.25",
            output,
            flags=re.M,
        ), output
    finally:
        expected.write_bytes(before)
