"""What a spec may write (issue 32, item 1): new model and data files, or files patchspec wrote as
outputs; never a tracked file that is not one, nothing in a virtual environment, and no file a tool
runs or reads as settings. ``--output-dir`` (the caller's) widens it.

The attack that opened the issue: one spec of ``apply specs/*.yaml`` rewrote the root
``pyproject.toml`` (its bytes an initializer's), the next loaded native code; another wrote a
``.pth`` into the repository's own ``.venv``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_paths import assert_refused, files_under, spec_with

from helpers import graph_model, tensor_info

PYPROJECT = b"[tool.patchspec]\nallow-native-code = true\n"


def evil_bytes_model() -> onnx.ModelProto:
    """A model whose one initializer holds the bytes of a pyproject.toml: written as a data file, the
    file is exactly those bytes."""
    weight = numpy_helper.from_array(np.frombuffer(PYPROJECT * 40, dtype=np.uint8).copy(), "w")
    return graph_model(
        [helper.make_node("Identity", ["w"], ["y"])],
        [tensor_info("x", [1])],
        [tensor_info("y", [len(PYPROJECT) * 40], onnx.TensorProto.UINT8)],
        [weight],
    )


@pytest.fixture
def project(repo):
    (repo / "pyproject.toml").write_text('[project]\nname = "victim"\n')
    onnx.save(evil_bytes_model(), repo / "evil.onnx")
    return repo


def spec(repo, body: str, name: str = "spec.yaml"):
    return spec_with(repo, body, name).with_suffix(".yaml")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("output: pyproject.toml\npatches: []\n", "is not a model file name"),
        ("output: Makefile\npatches: []\n", "is not a model file name"),
        ("output: tests/conftest.py\npatches: []\n", "is not a model file name"),
        (
            "output: o.onnx\npatches:\n  - external_data: {location: pyproject.toml, size_threshold: 0}\n",
            "is not a data file name",
        ),
        (
            "output: o.onnx\npatches:\n  - external_data: {location: GNUmakefile, size_threshold: 0}\n",
            "is not a data file name",
        ),
        (
            "output: o.onnx\npatches:\n  - external_data: {location: conftest.py, size_threshold: 0}\n",
            "is not a data file name",
        ),
        (
            "output: o.onnx\npatches:\n  - external_data: {location: zz.pth, size_threshold: 0}\n",
            "is not a data file name",
        ),
    ],
)
def test_a_spec_never_names_a_file_a_tool_runs_or_reads(project, run_cli, body, fragment):
    before = files_under(project)
    path = spec_with(project, body.replace("output:", "output:", 1)).parent / "spec.yaml"
    path.write_text(path.read_text().replace("model: m.onnx", "model: evil.onnx"))
    assert_refused(run_cli("apply", path), 2, fragment, "--output-dir")
    after = files_under(project)
    after.pop("spec.yaml"), before.pop("spec.yaml", None)
    assert after == before


def test_an_untracked_or_tracked_file_patchspec_did_not_write_is_never_replaced(project, run_cli):
    (project / "models").mkdir()
    theirs = project / "models" / "downloaded.onnx"
    onnx.save(evil_bytes_model(), theirs)  # a model, but not a patchspec output: no stamp
    before = theirs.read_bytes()
    path = spec_with(project, "output: models/downloaded.onnx\npatches: []\n")
    assert_refused(run_cli("apply", path), 2, "patchspec did not write", "--output-dir")
    assert theirs.read_bytes() == before


def test_outputs_patchspec_wrote_are_replaced_by_the_next_build(project, run_cli):
    path = spec_with(
        project, "output: build/o.onnx\npatches:\n  - external_data: {location: o.bin, size_threshold: 0}\n"
    )
    assert run_cli("apply", path, "--no-verify").exit_code == 0
    path.write_text(path.read_text() + "# a change to the spec rebuilds\n")
    result = run_cli("apply", path, "--no-verify")
    assert result.exit_code == 0 and "wrote" in result.stdout, result.output
    (project / "build" / ".o.onnx.patchspec-cache.json").unlink()  # the stamp alone still proves it
    path.write_text(path.read_text() + "# again\n")
    assert run_cli("apply", path, "--no-verify").exit_code == 0


def test_a_data_file_left_without_its_model_or_record_is_not_replaced(project, run_cli):
    (project / "build").mkdir()
    (project / "build" / "o.onnx.data").write_bytes(b"someone's bytes")
    path = spec_with(project, "output: build/o.onnx\npatches:\n  - external_data: {size_threshold: 0}\n")
    assert_refused(run_cli("apply", path), 2, "o.onnx.data", "patchspec did not write")
    assert (project / "build" / "o.onnx.data").read_bytes() == b"someone's bytes"


@pytest.mark.parametrize("marker", ["pyvenv.cfg", "conda-meta"])
def test_nothing_is_written_inside_a_virtual_environment(project, run_cli, marker):
    venv = project / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / marker).mkdir() if marker == "conda-meta" else (venv / marker).write_text("home = /usr\n")
    path = spec_with(project, "output: .venv/lib/python3.11/site-packages/zz.onnx\npatches: []\n")
    assert_refused(run_cli("apply", path), 2, "virtual environment")
    assert_refused(run_cli("apply", path, "--output-dir", site), 2, "virtual environment")  # never, whoever asks
    assert list(site.iterdir()) == []


@pytest.mark.parametrize("folder", ["node_modules", "__pycache__", "pkg.egg-info", "site-packages"])
def test_nothing_is_written_in_a_package_tools_folder(project, run_cli, folder):
    path = spec_with(project, f"output: {folder}/o.onnx\npatches: []\n")
    assert_refused(run_cli("apply", path), 2, "package tool's folder")
    assert not (project / folder).exists()


def test_output_dir_widens_names_and_replacing_in_that_folder_only(project, run_cli):
    out = project / "out"
    out.mkdir()
    (out / "o.weights.custom").write_bytes(b"old")
    path = spec_with(
        project, "output: out/o.onnx\npatches:\n  - external_data: {location: o.weights.custom, size_threshold: 0}\n"
    )
    assert_refused(run_cli("apply", path), 2, "is not a data file name")
    result = run_cli("apply", path, "--output-dir", out)
    assert result.exit_code == 0, result.output
    assert (out / "o.weights.custom").read_bytes() != b"old"
    other = spec_with(
        project,
        "output: elsewhere/o.onnx\npatches:\n  - external_data: {location: o.custom, size_threshold: 0}\n",
        "b.yaml",
    )
    assert_refused(run_cli("apply", other, "--output-dir", out), 2, "is not a data file name")


def test_the_issue_chain_one_spec_cannot_enable_native_code_for_the_next(project, run_cli):
    """Spec a writes pyproject.toml's bytes over it; spec b names a library. Neither happens."""
    a = spec_with(
        project,
        "output: o.onnx\npatches:\n  - external_data: {location: pyproject.toml, size_threshold: 0, align: 1}\n",
        "a.yaml",
    )
    a.write_text(a.read_text().replace("model: m.onnx", "model: evil.onnx"))
    b = spec_with(
        project,
        "output: b.onnx\npatches: []\nverify:\n  - run: {custom_op_libraries: [lib.so], cases: [{inputs: {x: [1, 256]}}]}\n",
        "b.yaml",
    )
    (project / "lib.so").write_bytes(b"\x7fELF")
    before = (project / "pyproject.toml").read_bytes()
    result = run_cli("apply", a, b)
    assert result.exit_code == 2, result.output
    assert (project / "pyproject.toml").read_bytes() == before
    assert_refused(run_cli("apply", b), 2, "native code")


def test_dotdot_after_a_link_is_checked_as_it_is_read(repo, run_cli):
    """Issue 32: 'in/../../x.npy' with 'in' a link to 'd1/d2' inside the root: the check resolved it
    the kernel's way (repo/x.npy, a decoy inside), the read lexically (../x.npy, outside)."""
    (repo / "d1" / "d2").mkdir(parents=True)
    (repo / "in").symlink_to(repo / "d1" / "d2")
    np.save(repo / "x.npy", np.zeros((1, 256), np.float32))  # the decoy the check saw
    np.save(repo.parent / "x.npy", np.full((1, 256), 7, np.float32))  # the secret the read reached
    path = spec_with(
        repo, "output: o.onnx\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: in/../../x.npy}}}]}\n"
    )
    assert_refused(run_cli("apply", path), 2, "outside the project root")


@pytest.mark.parametrize(
    "body", ["output: NUL.onnx\npatches: []\n", "output: o.onnx\npatches:\n  - external_data: {location: com1.data}\n"]
)
def test_windows_device_names_are_refused_everywhere(repo, run_cli, body):
    assert_refused(run_cli("apply", spec_with(repo, body)), 2, "is a device on Windows")


@pytest.mark.parametrize("name", [".PATCHSPEC.LOCK", ".Patchspec-1-x.data", ".o.onnx.PATCHSPEC-CACHE.JSON"])
def test_patchspecs_own_names_are_refused_in_any_case(repo, run_cli, name):
    result = run_cli("apply", spec_with(repo, f"output: o.onnx\npatches:\n  - external_data: {{location: '{name}'}}\n"))
    assert result.exit_code == 2, result.output
