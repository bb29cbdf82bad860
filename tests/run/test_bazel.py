"""examples/build-systems/bazel built by Bazel, as a user would (`make test-bazel`; skipped where
bazel is not installed): both models are built and verified in the sandbox, with patchspec's own
bytes and no path in them; the BUILD file declares every file patchspec reads; a second clone at
another path sharing the --disk_cache runs no action and gets byte-identical files, and so does one
sharing a --remote_cache (nginx with WebDAV on 127.0.0.1; skipped where nginx is not installed); a spec edit
re-runs its action only; a broken spec, a failing verifier, an undeclared input and an undeclared
output data file fail the build with a message that says so; strict_paths builds. The timings of the cold and the cached
build, and of the two remote-cache builds, are printed (`pytest -s`); PATCHSPEC_BAZEL_WEIGHTS_MIB=256 makes the linear model's weight
256 MiB (make_models.py --weights-mib)."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
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
    """A copy of the example at its own path, with its own Bazel output base (and server), built with the
    given cache flag (``--disk_cache=...`` or ``--remote_cache=...``)."""

    def __init__(self, root: Path, cache: str):
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
        flags = [self.cache, "--color=no", "--curses=no"] if command == "build" else []
        return run(["bazel", *startup, command, *flags, *args], self.folder, ok=ok)

    def build(self, *targets: str, ok: bool = True) -> str:
        return self.bazel("build", *(targets or ("//:models",)), ok=ok)

    def output(self, name: str) -> bytes:
        return (self.folder / "bazel-bin" / name).read_bytes()

    def shutdown(self) -> None:
        if self.output_base.exists():
            run(["bazel", f"--output_base={self.output_base}", "--nohome_rc", "shutdown"], self.folder, ok=True)


Timings = dict[str, tuple[float, str]]  # clone -> (seconds, Bazel's output) of its build
Clones = tuple[Clone, Clone, Timings]  # the first clone, the second, their builds


def run(args: Sequence[str | Path], cwd: Path, ok: bool = True) -> str:
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
def clones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clones]:
    """Clone a builds cold, then clone b, at another path, from the disk cache a filled; timed."""
    root = tmp_path_factory.mktemp("bazel")
    cache = f"--disk_cache={root / 'disk-cache'}"
    a, b = Clone(root / "a", cache), Clone(root / "b", cache)
    try:
        yield a, b, timed_builds(a, b)
    finally:
        a.shutdown()
        b.shutdown()


def timed_builds(a: Clone, b: Clone) -> Timings:
    """Build //:models in clone a, then in clone b; {name: (seconds, Bazel's output)}."""
    timings = {}
    for name, clone in (("a", a), ("b", b)):
        clone.bazel("info", "output_base")  # the server is up: what is timed is the build
        start = time.perf_counter()
        output = clone.build()
        timings[name] = (time.perf_counter() - start, output)
    return timings


def print_timings(timings: Timings, second: str) -> None:
    for name, what in (("a", "cold"), ("b", f"a second clone, from {second}")):
        seconds, output = timings[name]
        elapsed = re.search(r"Elapsed time: .*", output)
        bazel = elapsed.group(0) if elapsed else "no 'Elapsed time' in Bazel's output"
        print(f"\nbazel build //:models, {what}: {seconds:.2f} s ({bazel}; {processes(output)})", end="")
    print(f"\nsecond clone / cold, from {second}: {timings['b'][0] / timings['a'][0]:.2f}x", end="")


def test_both_models_are_built_and_verified_in_the_sandbox(clones: Clones) -> None:
    a, _, timings = clones
    counts = processes(timings["a"][1])
    assert sandboxed(counts) == 2 and "local" not in counts, timings["a"][1]
    linear = onnx.load(str(a.folder / "bazel-bin" / "linear_b4.onnx"), load_external_data=False)
    scale = onnx.load(str(a.folder / "bazel-bin" / "scale_b2.onnx"), load_external_data=False)
    original = read_dims(onnx.load(str(a.folder / "models" / "linear.onnx"), load_external_data=False).graph.input[0])
    assert original is not None and len(original) == 2, original
    k = original[1]
    assert read_dims(linear.graph.input[0]) == [4, k] and read_dims(scale.graph.input[0]) == [2, 8]
    assert linear.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    assert a.output("linear_b4.onnx.data") == (a.folder / "models" / "linear.onnx.data").read_bytes()


def test_outputs_are_patchspecs_own_bytes_with_no_path_in_them(clones: Clones, tmp_path: Path) -> None:
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


def test_the_build_declares_every_file_patchspec_reads(clones: Clones, tmp_path: Path) -> None:
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


def test_a_second_clone_runs_no_action_and_gets_the_same_bytes(clones: Clones) -> None:
    a, b, timings = clones
    counts = processes(timings["b"][1])
    assert sandboxed(counts) == 0 and cache_hits(counts) == 2, timings["b"][1]
    for name in OUTPUTS:
        assert b.output(name) == a.output(name), name
    print_timings(timings, "the disk cache")


def test_a_spec_edit_reruns_its_action_only(clones: Clones) -> None:
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


def test_a_broken_spec_fails_the_build_with_patchspecs_message(clones: Clones) -> None:
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


def test_an_undeclared_input_fails_the_build(clones: Clones) -> None:
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


def test_a_declared_input_that_links_to_a_secret_fails_before_it_is_read(clones: Clones, tmp_path: Path) -> None:
    """A pull request replaces data/x_b2.npy by a link to a file outside the workspace. The old rule
    took the deepest folder of every input's real file as --root, here /: the secret was read, and its
    bytes reached the log. The input must be the file its workspace path names."""
    _, b, _ = clones
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY----- s3cr3t")
    data = b.folder / "data" / "x_b2.npy"
    kept = data.read_bytes()
    try:
        data.unlink()
        data.symlink_to(secret)
        output = b.build("//:scale_b2", ok=False)
        assert f"the declared input data/x_b2.npy is a link to {secret}; declare the file itself" in output, output
        assert "s3cr3t" not in output
    finally:
        data.unlink()
        data.write_bytes(kept)


def test_an_undeclared_output_data_file_fails_the_build(clones: Clones) -> None:
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


def test_strict_paths_builds_on_copies_of_the_model_and_its_data(clones: Clones) -> None:
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


def test_a_failing_verifier_fails_the_build(clones: Clones) -> None:
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


# -- a remote cache: nginx with WebDAV, Bazel's HTTP cache protocol (GET and PUT of /ac/ and /cas/ keys) ---------
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")  # /usr/sbin: not on a user's PATH
NGINX_CONF = """\
# nginx as Bazel's HTTP remote cache: everything under {prefix}, nothing of the system's config read
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
user {user} {group};  # the workers write the cache as this user (ignored when not started as root)
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 0;          # no limit on an output's size
        location / {{
            root {prefix}/cache;
            dav_methods PUT;             # Bazel PUTs /ac/<digest> and /cas/<digest>, GETs them back
            create_full_put_path on;     # ac/ and cas/ are created on the first PUT
            dav_access user:rw;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def remote_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """nginx serving a WebDAV folder on 127.0.0.1 at a free port: its URL; stopped afterwards."""
    if NGINX is None:
        pytest.skip("nginx is not installed (make test-bazel installs it as root: apt-get install nginx-core)")
    prefix = tmp_path_factory.mktemp("nginx")
    for folder in ("cache", "tmp"):
        (prefix / folder).mkdir()
    port = free_port()
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, user=user, group=group))
    # -e: the error log before the config is read (the default is under /var/log); -p: the prefix
    server = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                log = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                assert server.poll() is None, f"nginx exited {server.returncode} ({conf}):\n{log}"
                assert time.monotonic() < deadline, f"nginx does not listen on 127.0.0.1:{port} after 20 s:\n{log}"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", prefix / "cache"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def remote_clones(remote_cache: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clones]:
    """Clones c and d, no disk cache, sharing the remote cache; each Bazel server shut down once built."""
    url, _ = remote_cache
    root = tmp_path_factory.mktemp("bazel-remote")
    c, d = Clone(root / "c", f"--remote_cache={url}"), Clone(root / "d", f"--remote_cache={url}")
    try:
        yield c, d, timed_builds(c, d)
    finally:
        c.shutdown()
        d.shutdown()


def test_a_second_clone_gets_every_action_from_a_remote_cache(
    remote_clones: Clones, remote_cache: tuple[str, Path]
) -> None:
    c, d, timings = remote_clones
    first, second = processes(timings["a"][1]), processes(timings["b"][1])
    assert sandboxed(first) == 2 and first.get("remote cache hit", 0) == 0, timings["a"][1]
    assert "--disk_cache" not in c.cache and not any("disk cache" in kind for kind in second)
    assert sandboxed(second) == 0 and "local" not in second and second.get("remote cache hit") == 2, timings["b"][1]
    assert set(second) <= {"remote cache hit", "internal"}, second
    for name in OUTPUTS:
        assert d.output(name) == c.output(name), f"{name}: the second clone's bytes differ from the first's"
    _, folder = remote_cache
    assert list((folder / "cas").iterdir()) and list((folder / "ac").iterdir()), "nginx stored nothing"
    print_timings(timings, "the remote cache")
