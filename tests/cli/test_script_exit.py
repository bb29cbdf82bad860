"""The ``patchspec`` command's last step: a run a signal stopped leaves with ``os._exit`` (no interpreter
teardown, where onnxruntime's threads could abort the process with -6 after the cleanup); any other
run leaves through ``sys.exit``, so ``atexit`` and buffered output work as usual."""

from __future__ import annotations

import pytest

import patchspec.cli as cli


class Left(Exception):
    def __init__(self, how: str, code: int) -> None:
        super().__init__(how, code)
        self.how, self.code = how, code


@pytest.fixture
def leaving(monkeypatch: pytest.MonkeyPatch) -> None:
    def hard(code: int) -> None:
        raise Left("os._exit", code)

    def soft(code: int) -> None:
        raise Left("sys.exit", code)

    monkeypatch.setattr(cli.os, "_exit", hard)
    monkeypatch.setattr(cli.sys, "exit", soft)


@pytest.mark.parametrize(("signalled", "how"), [(15, "os._exit"), (None, "sys.exit")])
def test_a_signalled_run_skips_the_teardown(monkeypatch, leaving, signalled: int | None, how: str) -> None:
    monkeypatch.setattr(cli, "main", lambda: 143 if signalled else 0)
    monkeypatch.setattr(cli, "received", lambda: signalled)
    with pytest.raises(Left) as left:
        cli.script()
    assert (left.value.how, left.value.code) == (how, 143 if signalled else 0)
