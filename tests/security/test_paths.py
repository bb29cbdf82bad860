"""Attacks through paths, from issue 25: a spec (or a model) from a pull request tries to write,
read or delete outside what it may. Each is refused with the exit code of docs/security.md, and
nothing outside the project root changes.

Layout of every test: ``tmp/repo`` is the repository (it holds ``.git``), ``tmp/outside`` stands
for the rest of the machine (a virtualenv's site-packages, an SSH key).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.run.depfile import make_escape
from patchspec.run.statcache import cache_path


def add_model(value: float = 1.0) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full((1, 256), value, dtype=np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", [1, 256])],
        [tensor_info("y", [1, 256])],
        [weight],
    )


def save_external(model: onnx.ModelProto, path: Path) -> None:
    onnx.save(model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0)


def files_under(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``folder`` (links as links): its mode and bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = os.lstat(path)
        body = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else b""
        if stat.S_ISREG(st.st_mode):
            body = path.read_bytes()
        found[str(path.relative_to(folder))] = (stat.S_IFMT(st.st_mode), body)
    return found


def outside_of(repo: Path) -> Path:
    return repo.parent / "outside"


def spec_with(repo: Path, body: str, name: str = "spec.yaml") -> Path:
    return write_spec(repo, "patchspec: 1\nmodel: m.onnx\n" + body, name=name)


def assert_refused(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert "this is a bug" not in result.stderr


# -- write anywhere --------------------------------------------------------------------------------
def test_pth_file_into_site_packages_through_dotdot_is_refused(repo, run_cli):
    before = files_under(outside_of(repo))
    spec = spec_with(
        repo,
        "output: ../outside/lib/site-packages/zz.onnx\n"
        "patches:\n  - external_data: {location: zz_evil.pth, size_threshold: 1}\n",
    )
    result = run_cli("apply", spec, "--no-verify")
    assert_refused(result, 2, "output", "outside the project root", "--root")
    assert files_under(outside_of(repo)) == before


def test_an_output_folder_linked_outside_the_root_is_refused(repo, run_cli):
    os.symlink(outside_of(repo) / "lib" / "site-packages", repo / "out")
    before = files_under(outside_of(repo))
    result = run_cli("apply", spec_with(repo, "output: out/zz.onnx\npatches: []\n"), "--no-verify")
    assert_refused(result, 2, "output", "outside the project root")
    assert files_under(outside_of(repo)) == before


def test_git_config_as_a_data_file_is_refused(repo, run_cli):
    before = files_under(repo / ".git")
    spec = spec_with(repo, "output: .git/m.onnx\npatches:\n  - external_data: {location: config}\n")
    result = run_cli("apply", spec, "--no-verify")
    assert_refused(result, 2, "output", ".git folder")
    assert files_under(repo / ".git") == before


def test_a_fifo_or_device_at_the_output_is_never_replaced(repo, run_cli):
    os.mkfifo(repo / "fifo.onnx")
    result = run_cli("apply", spec_with(repo, "output: fifo.onnx\npatches: []\n"), "--no-verify")
    assert_refused(result, 2, "FIFO", "only ever replaces regular files")
    assert stat.S_ISFIFO(os.lstat(repo / "fifo.onnx").st_mode)
    if os.geteuid() == 0:  # only root can make a device node
        os.mknod(repo / "null.onnx", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        result = run_cli("apply", spec_with(repo, "output: null.onnx\npatches: []\n"), "--no-verify")
        assert_refused(result, 2, "character device")
        assert stat.S_ISCHR(os.lstat(repo / "null.onnx").st_mode)


def test_output_may_not_name_the_spec_itself_or_a_file_a_step_reads(repo, run_cli):
    spec = spec_with(repo, "output: spec.yaml\npatches: []\n")
    text = spec.read_text()
    assert_refused(run_cli("apply", spec, "--no-verify"), 2, "would replace the spec")
    assert spec.read_text() == text
    np.save(repo / "x.npy", np.ones((1, 256), np.float32))
    before = (repo / "x.npy").read_bytes()
    spec = spec_with(
        repo, "output: x.npy\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: x.npy}}}]}\n", name="s2.yaml"
    )
    assert_refused(run_cli("apply", spec), 2, "would replace a file a step reads")
    assert (repo / "x.npy").read_bytes() == before


@pytest.mark.parametrize(
    "location",
    [".", "..", ".patchspec.lock", ".out.onnx.patchspec-cache.json", ".patchspec-1-x", ".git"],
)
def test_reserved_names_are_refused_as_locations(repo, run_cli, location):
    spec = spec_with(repo, f"output: out.onnx\npatches:\n  - external_data: {{location: '{location}'}}\n")
    result = run_cli("apply", spec, "--no-verify")
    assert result.exit_code == 2, result.output
    assert "this is a bug" not in result.stderr
    assert not (repo / "out.onnx").exists()


# -- read anywhere ---------------------------------------------------------------------------------
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "no-verify"])
def test_data_file_linked_outside_the_root_is_never_read(repo, run_cli, verify):
    (repo / "m.onnx.data").unlink()
    os.symlink(outside_of(repo) / "id_rsa", repo / "m.onnx.data")
    spec = spec_with(repo, "output: out/m.onnx\npatches: []\n")
    result = run_cli("apply", spec, *([] if verify else ["--no-verify"]))
    assert_refused(result, 3, "tensor 'w'", "outside the project root", "--root")
    assert not (repo / "out").exists()


def test_a_step_file_linked_outside_the_root_is_refused(repo, run_cli):
    os.symlink(outside_of(repo) / "id_rsa", repo / "x.npy")
    spec = spec_with(repo, "output: o.onnx\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: x.npy}}}]}\n")
    assert_refused(run_cli("validate", spec), 2, "x.npy resolves to", "outside the project root")


def test_root_given_on_the_command_line_allows_what_the_spec_cannot(repo, run_cli):
    save_external(add_model(), outside_of(repo) / "shared.onnx")
    spec = spec_with(repo, "output: out/m.onnx\npatches: []\n").with_name("spec.yaml")
    spec.write_text(spec.read_text().replace("model: m.onnx", "model: ../outside/shared.onnx"))
    assert_refused(run_cli("apply", spec, "--no-verify"), 2, "model", "outside the project root")
    assert run_cli("apply", spec, "--no-verify", "--root", repo.parent).exit_code == 0


# -- devices and FIFOs -----------------------------------------------------------------------------
def test_dev_zero_as_model_is_refused_at_once(repo, run_cli):
    spec = spec_with(repo, "output: o.onnx\npatches: []\n").with_name("spec.yaml")
    spec.write_text(spec.read_text().replace("model: m.onnx", "model: /dev/zero"))
    assert_refused(run_cli("apply", spec, "--check"), 2, "outside the project root")
    assert_refused(run_cli("apply", spec, "--root", "/"), 3, "not a regular file")


def run_with_timeout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process, so that a hang is a failure, not a stuck suite."""
    env = {k: v for k, v in os.environ.items() if k != "PATCHSPEC_ROOT"}
    command = [sys.executable, "-m", "patchspec", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, env=env)


def test_fifo_as_model_or_file_input_never_hangs(repo):
    os.mkfifo(repo / "pipe.onnx")
    spec = spec_with(repo, "output: o.onnx\npatches: []\n").with_name("spec.yaml")
    spec.write_text(spec.read_text().replace("model: m.onnx", "model: pipe.onnx"))
    result = run_with_timeout("apply", str(spec), cwd=repo)
    assert result.returncode == 3 and "not a regular file" in result.stderr, result.stderr
    os.mkfifo(repo / "x.npy")
    spec = spec_with(repo, "output: o.onnx\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: x.npy}}}]}\n")
    result = run_with_timeout("apply", str(spec), cwd=repo)
    assert result.returncode == 2 and "FIFO" in result.stderr, result.stderr


# -- Make runs the spec's command ------------------------------------------------------------------
def test_newline_in_a_file_path_is_refused_before_any_depfile(repo, run_cli):
    spec = spec_with(
        repo,
        'output: o.onnx\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: "x.npy\\nall:\\n\\ttouch pwned"}}}]}\n',
    )
    result = run_cli("apply", spec, "--depfile", repo / "o.d")
    assert_refused(result, 2, "control character '\\n'")
    assert not (repo / "o.d").exists()


@pytest.mark.parametrize(
    ("path", "escaped"),
    [
        ("a b", "a\\ b"),
        ("a#b", "a\\#b"),
        ("a$b", "a$$b"),
        ("c:/x", "c\\:/x"),
        ("modèle-1+2,3@x.npy", "modèle-1+2,3@x.npy"),
    ],
)
def test_depfile_escapes_what_make_and_ninja_treat_specially(path, escaped):
    assert make_escape(path) == escaped


@pytest.mark.parametrize(
    "path", ["a;b", "a|b", "a=b", "a%b", "a*b", "a?b", "a[b]", "a(b)", "a\\b", "a'b", "a{b}", "~/x", "a`b`", "a&b"]
)
def test_depfile_refuses_what_has_no_escape(path):
    from patchspec.errors import UsageError

    with pytest.raises(UsageError, match="cannot be named in a depfile"):
        make_escape(path)


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85"])
def test_depfile_refuses_control_characters(char):
    from patchspec.errors import UsageError

    with pytest.raises(UsageError, match="control character"):
        make_escape(f"x{char}y")


def test_control_characters_in_names_are_refused(repo, run_cli):
    spec = spec_with(repo, 'output: o.onnx\npatches:\n  - rename_dims: {tensor: ["x\\u001b[2J"], axes: {0: B}}\n')
    assert_refused(run_cli("validate", spec), 2, "control character")


# -- deleting the user's files ---------------------------------------------------------------------
def test_patchspec_files_metadata_never_deletes_user_files(repo, run_cli):
    spec = spec_with(repo, "output: m_out.onnx\npatches: []\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    (repo / "precious.txt").write_text("mine")
    forged = onnx.load(str(repo / "m_out.onnx"), load_external_data=False)
    entry = forged.metadata_props.add()
    entry.key, entry.value = "patchspec.files", '{"m.onnx": {}, "m.onnx.data": {}, "precious.txt": {}}'
    onnx.save(forged, repo / "m_out.onnx")
    cache_path(repo / "m_out.onnx").unlink()
    for args in ([], ["--force"]):
        assert run_cli("apply", spec, "--no-verify", *args).exit_code == 0
        assert (repo / "m.onnx").is_file() and (repo / "m.onnx.data").is_file()
        assert (repo / "precious.txt").read_text() == "mine"


def test_a_superseded_data_file_is_deleted_only_while_it_is_what_patchspec_wrote(repo, run_cli):
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - external_data: {location: '{digest}.w'}\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    (first,) = repo.glob("*.w")
    first.write_bytes(first.read_bytes() + b"edited by the user")  # no longer what patchspec wrote
    spec.write_text(spec.read_text() + "# a new digest\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    assert first.exists() and len(list(repo.glob("*.w"))) == 2
    (second,) = set(repo.glob("*.w")) - {first}
    spec.write_text(spec.read_text() + "# again\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    assert not second.exists()  # untouched since it was written: patchspec's to remove


# -- temporary files -------------------------------------------------------------------------------
def test_planted_links_at_the_old_temporary_names_are_never_written_through(repo, run_cli):
    victim = outside_of(repo) / "id_rsa"
    before = victim.read_bytes()
    pid = os.getpid()  # the in-process run's pid: the names the old code would have used
    for name in (f".o.onnx.patchspec-cache.json.{pid}.tmp", f".o.d.tmp{pid}", ".o.onnx.patchspec-cache.json"):
        os.symlink(victim, repo / name)
    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    assert run_cli("apply", spec, "--no-verify", "--depfile", repo / "o.d").exit_code == 0
    assert victim.read_bytes() == before
    assert not (repo / ".o.onnx.patchspec-cache.json").is_symlink()  # replaced, not followed


def test_staging_folders_of_dead_processes_are_removed(repo, run_cli):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = repo / f".patchspec-{int(dead.stdout)}-abc"
    gone.mkdir()
    (gone / "o.onnx").write_bytes(b"\0" * 4096)
    alive = repo / f".patchspec-{os.getppid()}-abc"
    alive.mkdir()
    os.symlink(outside_of(repo), repo / f".patchspec-{int(dead.stdout)}-link")
    assert run_cli("apply", spec_with(repo, "output: o.onnx\npatches: []\n"), "--no-verify").exit_code == 0
    assert not gone.exists() and alive.is_dir()
    assert (repo / f".patchspec-{int(dead.stdout)}-link").is_symlink() and outside_of(repo).is_dir()


def test_verify_reads_no_output_or_model_outside_the_root(repo, run_cli):
    save_external(add_model(), outside_of(repo) / "o.onnx")
    spec = spec_with(repo, "output: ../outside/o.onnx\npatches: []\n")
    assert_refused(run_cli("verify", spec), 2, "output", "outside the project root")
    assert run_cli("verify", spec, "--root", repo.parent).exit_code == 0
