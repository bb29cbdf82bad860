"""Session runs under a watchdog: a timeout, onnxruntime's own errors, and a signal while waiting."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import graph_model, tensor_info
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import OnnxRuntimeError, Session, build_session, run_bounded


def counting_loop(trips: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "one"], ["x_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    model: onnx.ModelProto = graph_model(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)],
        [tensor_info("x", [1])],
        [tensor_info("y", [1])],
        [
            helper.make_tensor("trips", TensorProto.INT64, [], [trips]),
            helper.make_tensor("cond", TensorProto.BOOL, [], [True]),
        ],
    )
    return model


def test_a_run_within_its_bound_returns_its_values(tmp_path: Path) -> None:
    session = build_session(counting_loop(5).SerializeToString(), "CPUExecutionProvider", "disabled")
    (y,) = run_bounded(session, {"x": np.zeros(1, np.float32)}, timeout=30)
    assert y.tolist() == [5.0]


def test_onnxruntime_errors_come_back_as_its_message(tmp_path: Path) -> None:
    session = build_session(counting_loop(5).SerializeToString(), "CPUExecutionProvider")
    with pytest.raises(OnnxRuntimeError, match="x"):
        run_bounded(session, {"x": np.zeros((2, 2), np.float32)}, timeout=30)  # the wrong rank


def test_a_failed_run_names_the_node_and_keeps_onnxruntime_words_as_detail(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(
        graph_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2])], [tensor_info("y", [2])]), path
    )
    with pytest.raises(RunFailure) as failure:
        Session(path, "CPUExecutionProvider").run({"x": np.zeros(3, np.float32)})
    assert str(path) in failure.value.message and failure.value.detail in failure.value.message
    assert str(path) not in failure.value.detail


def test_a_signal_while_waiting_stops_the_run_before_it_goes_on(tmp_path: Path) -> None:
    """The handler's exception reaches the caller only once onnxruntime has returned: a process
    that exits then never aborts with onnxruntime still running in another thread."""
    onnx.save(counting_loop(10**12), tmp_path / "loop.onnx")
    session = Session(Path(tmp_path / "loop.onnx"), "CPUExecutionProvider", "disabled", timeout=None)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.run({"x": np.zeros(1, np.float32)})
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 10
    workers = [t for t in threading.enumerate() if t.name == "patchspec-onnxruntime-run"]
    for worker in workers:  # onnxruntime has returned; the thread itself ends a moment later
        worker.join(2)
    assert not [t for t in workers if t.is_alive()]
