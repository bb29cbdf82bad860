"""The data sink starts writing a data file back to the disk while it copies, and stays correct
where the kernel refuses the advice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchspec.model import data_sink
from patchspec.model.data_sink import Sink


@pytest.fixture
def advice(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    calls: list[tuple[int, int, int]] = []

    def record(fd: int, offset: int, length: int, what: int) -> None:
        calls.append((offset, length, what))

    monkeypatch.setattr(data_sink, "WRITEBACK_EVERY", 1000)
    monkeypatch.setattr(os, "posix_fadvise", record, raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_DONTNEED", 4, raising=False)
    return calls


def _source(tmp_path: Path, size: int) -> tuple[int, bytes]:
    data = bytes(range(256)) * (size // 256)
    (tmp_path / "in.data").write_bytes(data)
    return os.open(tmp_path / "in.data", os.O_RDONLY), data


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "reads"])
def test_writeback_follows_the_copy_without_gaps(
    tmp_path: Path, advice: list[tuple[int, int, int]], kernel: bool
) -> None:
    fd, data = _source(tmp_path, 4096)
    sink = Sink(tmp_path / "out.data", len(data), None)
    sink.kernel_copy = sink.kernel_copy and kernel
    try:
        for start in range(0, 4096, 512):
            sink.copy_from(fd, start, 512, None)
        sink.write(b"\0" * 100)
    finally:
        sink.close()
        os.close(fd)
    assert (tmp_path / "out.data").read_bytes() == data + b"\0" * 100
    assert advice, "nothing was written back before the fsync"
    assert all(what == 4 for _, _, what in advice)
    ends = [0] + [offset + length for offset, length, _ in advice]
    assert [offset for offset, _, _ in advice] == ends[:-1], "the written-back ranges leave a gap"
    assert 4096 - 1000 <= ends[-1] <= 4096 + 100, "the writeback stayed far behind the copy"


def test_a_refused_advice_still_writes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(data_sink, "WRITEBACK_EVERY", 100)
    monkeypatch.setattr(os, "posix_fadvise", refuse, raising=False)
    fd, data = _source(tmp_path, 1024)
    sink = Sink(tmp_path / "out.data", len(data), None)
    try:
        sink.copy_from(fd, 0, 1024, None)
    finally:
        sink.close()
        os.close(fd)
    assert (tmp_path / "out.data").read_bytes() == data
