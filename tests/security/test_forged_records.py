"""Committed caches and stamps are hints, not truth (issue 32, item 6).

A pull request can commit a stat cache and an output. A forged cache deleted the tracked LICENSE
(its "written" entry named it with the right inode and hash), ``{output: null}`` made ``apply`` say
"up to date" and write nothing, and an output whose stamp was computed offline passed ``--check``.
A cache counts only when this machine signed it; a stamp counts only where such a cache vouches
for the file, else ``--check`` builds again and compares the bytes.
"""

from __future__ import annotations

import json
import os
import shutil

import onnx
from test_paths import spec_with

import patchspec.run.statcache as statcache
from patchspec.run.statcache import cache_path, identity


def forge(path, payload):
    """A cache as a pull request commits it: well formed, current format, not signed here."""
    path.write_text(json.dumps({"format": statcache.FORMAT, **payload}), encoding="utf-8")


def test_a_forged_cache_deletes_nothing(repo, run_cli):
    (repo / "LICENSE").write_text("Apache-2.0")
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - external_data: {location: '{digest}.w'}\n")
    licence = repo / "LICENSE"
    entry = {"identity": identity(licence)}  # what a record of this machine holds for a file it wrote
    forge(cache_path(repo / "o.onnx"), {"output": {}, "files": {}, "written": {str(licence): entry}, "build": {}})
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert licence.read_text() == "Apache-2.0"
    assert "was not written by patchspec for this user on this machine" in result.stderr


def test_a_forged_up_to_date_record_builds_the_output(repo, run_cli):
    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    forge(cache_path(repo / "o.onnx"), {"output": None, "files": {}, "written": {}, "build": {}})
    result = run_cli("apply", spec)
    assert result.exit_code == 0 and "wrote" in result.stdout, result.output
    assert (repo / "o.onnx").is_file()


def test_an_output_stamped_offline_is_stale_for_check_and_rebuilt_by_apply(repo, run_cli, tmp_path):
    """The committed output carries the right digest (copied from a real build) but other bytes."""
    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    assert run_cli("apply", spec).exit_code == 0
    real = onnx.load(str(repo / "o.onnx"))
    forged = onnx.ModelProto()
    forged.CopyFrom(real)
    forged.graph.node[0].op_type = "Sub"  # a backdoor, with the stamp of the honest build
    for name in ("o.onnx", "o.onnx.data"):
        (repo / name).unlink(missing_ok=True)
    cache_path(repo / "o.onnx").unlink()
    onnx.save(forged, repo / "o.onnx", save_as_external_data=True, location="o.onnx.data", size_threshold=0)
    check = run_cli("apply", "--check", spec)
    assert check.exit_code == 6 and "not what this spec builds" in check.stdout, check.output
    rebuilt = run_cli("apply", spec)
    assert rebuilt.exit_code == 0 and "wrote" in rebuilt.stdout, rebuilt.output
    assert onnx.load(str(repo / "o.onnx")).graph.node[0].op_type == "Add"


def test_an_honest_committed_output_is_up_to_date_on_a_fresh_clone(repo, run_cli, tmp_path):
    """No record of this machine vouches for it: --check builds again in a temporary folder, finds
    the same bytes, and writes nothing beside the output."""
    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    assert run_cli("apply", spec).exit_code == 0
    clone = tmp_path / "clone"
    shutil.copytree(repo, clone, ignore=shutil.ignore_patterns("*.patchspec-cache.json", ".patchspec.lock"))
    before = sorted(p.name for p in clone.iterdir())
    check = run_cli("apply", "--check", clone / "spec.yaml")
    assert check.exit_code == 0 and "up to date" in check.stdout, check.output
    assert sorted(p.name for p in clone.iterdir()) == before


def test_a_full_or_missing_temporary_folder_is_exit_3_not_a_bug(repo, run_cli, tmp_path, monkeypatch):
    import tempfile

    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    assert run_cli("apply", spec).exit_code == 0
    cache_path(repo / "o.onnx").unlink()  # no record: --check builds again in the temporary folder
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    result = run_cli("apply", "--check", spec)
    assert result.exit_code == 3 and "temporary folder" in result.stderr, result.output


def test_a_signed_cache_of_the_old_format_proves_nothing(repo, run_cli):
    """A cache of the format before (its "written" record by inode and plain sha256), even signed
    here, is not read: what it names is never taken for a file patchspec wrote."""
    import hashlib

    (repo / "LICENSE").write_text("Apache-2.0")
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - external_data: {location: '{digest}.w'}\n")
    licence = repo / "LICENSE"
    entry = {"inode": os.lstat(licence).st_ino, "sha256": hashlib.sha256(licence.read_bytes()).hexdigest()}
    payload = {"format": 2, "output": {}, "files": {}, "written": {str(licence): entry}, "build": {}, "derived": []}
    key = statcache.machine_key()
    assert key is not None
    payload["signature"] = statcache.signature(payload, key)
    cache_path(repo / "o.onnx").write_text(json.dumps(payload), encoding="utf-8")
    assert run_cli("apply", spec).exit_code == 0
    assert licence.read_text() == "Apache-2.0"


def test_a_same_size_edit_with_its_mtime_put_back_is_not_what_patchspec_wrote(repo, run_cli):
    """Ownership is the identity recorded once the file was in place: an edit moves the ctime, which
    no one can set back, and the content, read again, is not the build's: the file is kept."""
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - external_data: {location: '{digest}.w'}\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    (first,) = repo.glob("*.w")
    before = os.stat(first)
    edited = bytearray(first.read_bytes())
    edited[0] ^= 0xFF
    with open(first, "r+b") as handle:  # the same inode, the same size
        handle.write(bytes(edited))
    os.utime(first, ns=(before.st_atime_ns, before.st_mtime_ns))
    spec.write_text(spec.read_text() + "# a new digest\n")
    assert run_cli("apply", spec, "--no-verify").exit_code == 0
    assert first.exists() and len(list(repo.glob("*.w"))) == 2
