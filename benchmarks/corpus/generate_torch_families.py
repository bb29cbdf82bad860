"""Torch export families of models users re-batch (``generate.py torch_families``), tiny and seeded.

A decoder step with a KV cache, BERT with token types and a 4-D additive mask, attention with a key
padding mask (sequence first), LSTMs and GRUs with their starting states as inputs, a CTC recognizer
with ``[T, B, C]`` output, UNets that interpolate by scale and by size, LayerNorm over ``[C, H, W]``, a
patchify with ``-1``, a temperature scalar, detection post-processing (TopK + GatherElements, RT-DETR's
``orig_target_sizes``), register tokens from ``new_zeros`` and ``arange``, and controls: CLIP-style
``[B, B]`` logits, ``h - h[0]``, torchvision's ``batched_nms`` over the flattened batch, a dynamically
quantized BERT. Each at a static batch 1 by TorchScript and, for most, by dynamo; some with dynamic axes.
Written with torch 2.14.1 and torchvision 0.29.1 (the ``torch-families`` package's pins in models.toml).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import onnx
import torch
from torch_family_models import (
    KV_NAMES,
    KV_OUT,
    LNCHW,
    BatchedNMS,
    ContrastiveLogits,
    CTCRec,
    DecoderStep,
    DetTopK,
    FirstSampleRef,
    GRUSeqFirst,
    LSTMState,
    Patchify,
    RegisterTokens,
    RTDETRPost,
    SeqFirstMHA,
    Temperature,
    TinyBert,
    TinyUNet,
    kv_inputs,
)

warnings.filterwarnings("ignore")
PACKAGE = "torch-families"
_saved: list[Callable[[str, str, object], None]] = []  # the save callback of the run


def export(name, module, args, names, outputs, *, dynamo=False, dynamic_axes=None, dynamic_shapes=None):
    torch.manual_seed(0)
    module = module.eval()
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        path = Path(folder) / "m.onnx"
        if dynamo:
            kw = {"dynamic_shapes": dynamic_shapes} if dynamic_shapes else {}
            torch.onnx.export(
                module,
                args,
                str(path),
                input_names=names,
                output_names=outputs,
                dynamo=True,
                optimize=True,
                external_data=False,
                **kw,
            )
        else:
            torch.onnx.export(
                module,
                args,
                str(path),
                input_names=names,
                output_names=outputs,
                dynamo=False,
                opset_version=17,
                dynamic_axes=dynamic_axes,
            )
        model = onnx.load(str(path))
    size = len(model.SerializeToString())
    assert size < 200_000, name
    _saved[0](PACKAGE, f"{name}.onnx", model)
    return model


def main():
    torch.manual_seed(0)

    # KV cache decoder: TorchScript static b1, TorchScript dynamic batch+past, dynamo static
    m = DecoderStep()
    export("kvcache_ts_b1", m, kv_inputs(), KV_NAMES, KV_OUT)
    dyn = {
        "input_ids": {0: "batch"},
        "past_key": {0: "batch", 2: "past"},
        "past_value": {0: "batch", 2: "past"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch"},
        "logits": {0: "batch"},
        "present_key": {0: "batch", 2: "total"},
        "present_value": {0: "batch", 2: "total"},
    }
    export("kvcache_ts_dyn", m, kv_inputs(2), KV_NAMES, KV_OUT, dynamic_axes=dyn)
    export("kvcache_dynamo_b1", m, kv_inputs(), KV_NAMES, KV_OUT, dynamo=True)

    # BERT
    m = TinyBert()
    bargs = (torch.randint(0, 20, (1, 6)), torch.tensor([[0, 0, 0, 1, 1, 1]]), torch.tensor([[1, 1, 1, 1, 1, 0]]))
    bert = export(
        "bert_addmask_ts_b1",
        m,
        bargs,
        ["input_ids", "token_type_ids", "attention_mask"],
        ["last_hidden_state", "pooler_output"],
    )
    export(
        "bert_addmask_dynamo_b1",
        m,
        bargs,
        ["input_ids", "token_type_ids", "attention_mask"],
        ["last_hidden_state", "pooler_output"],
        dynamo=True,
    )

    # seq-first MHA + key_padding_mask
    m = SeqFirstMHA()
    margs = (torch.randn(5, 1, 8), torch.tensor([[False, False, False, True, True]]))
    export("mha_kpm_seqfirst_ts_b1", m, margs, ["x", "key_padding_mask"], ["y", "weights"])
    export("mha_kpm_seqfirst_dynamo_b1", m, margs, ["x", "key_padding_mask"], ["y", "weights"], dynamo=True)

    # LSTM/GRU explicit states
    m = LSTMState()
    largs = (torch.randn(1, 4, 5), torch.randn(2, 1, 6), torch.randn(2, 1, 6))
    export("lstm_h0c0_ts_b1", m, largs, ["x", "h0", "c0"], ["y", "hn", "cn"])
    export(
        "lstm_h0c0_ts_dyn",
        m,
        (torch.randn(2, 4, 5), torch.randn(2, 2, 6), torch.randn(2, 2, 6)),
        ["x", "h0", "c0"],
        ["y", "hn", "cn"],
        dynamic_axes={
            "x": {0: "batch", 1: "time"},
            "h0": {1: "batch"},
            "c0": {1: "batch"},
            "y": {0: "batch"},
            "hn": {1: "batch"},
            "cn": {1: "batch"},
        },
    )
    export("lstm_h0c0_dynamo_b1", m, largs, ["x", "h0", "c0"], ["y", "hn", "cn"], dynamo=True)
    m = GRUSeqFirst()
    export("gru_seqfirst_h0_ts_b1", m, (torch.randn(4, 1, 5), torch.randn(2, 1, 6)), ["x", "h0"], ["y", "hn"])

    # CTC
    m = CTCRec()
    export("ctc_tbc_ts_b1", m, (torch.randn(1, 1, 8, 10),), ["image"], ["log_probs"])
    export("ctc_tbc_dynamo_b1", m, (torch.randn(1, 1, 8, 10),), ["image"], ["log_probs"], dynamo=True)

    # UNet
    export("unet_scale_ts_b1", TinyUNet(False), (torch.randn(1, 3, 8, 8),), ["x"], ["y"])
    export("unet_size_ts_b1", TinyUNet(True), (torch.randn(1, 3, 8, 8),), ["x"], ["y"])
    export("unet_size_dynamo_b1", TinyUNet(True), (torch.randn(1, 3, 8, 8),), ["x"], ["y"], dynamo=True)

    # LN over CHW
    export("layernorm_chw_ts_b1", LNCHW(), (torch.randn(1, 3, 6, 6),), ["x"], ["y"])
    export("layernorm_chw_dynamo_b1", LNCHW(), (torch.randn(1, 3, 6, 6),), ["x"], ["y"], dynamo=True)

    # patchify
    export("patchify_ts_b1", Patchify(), (torch.randn(1, 3, 4, 6),), ["x"], ["y"])
    export("patchify_dynamo_b1", Patchify(), (torch.randn(1, 3, 4, 6),), ["x"], ["y"], dynamo=True)

    # scalar temperature
    export("temperature_ts_b1", Temperature(), (torch.randn(1, 6), torch.tensor(0.7)), ["x", "temperature"], ["p"])
    export(
        "temperature_dynamo_b1",
        Temperature(),
        (torch.randn(1, 6), torch.tensor(0.7)),
        ["x", "temperature"],
        ["p"],
        dynamo=True,
    )

    # detection postprocess
    export("det_topk_ts_b1", DetTopK(), (torch.randn(1, 3, 4, 4),), ["image"], ["boxes", "scores", "labels"])
    export(
        "det_topk_dynamo_b1",
        DetTopK(),
        (torch.randn(1, 3, 4, 4),),
        ["image"],
        ["boxes", "scores", "labels"],
        dynamo=True,
    )
    rargs = (torch.randn(1, 3, 8, 8), torch.tensor([[640, 480]]))
    export("rtdetr_post_ts_b1", RTDETRPost(), rargs, ["images", "orig_target_sizes"], ["labels", "boxes", "scores"])
    export(
        "rtdetr_post_dynamo_b1",
        RTDETRPost(),
        rargs,
        ["images", "orig_target_sizes"],
        ["labels", "boxes", "scores"],
        dynamo=True,
    )

    # register token / arange
    export("register_token_ts_b1", RegisterTokens(), (torch.randn(1, 4, 6),), ["x"], ["y"])
    export("register_token_dynamo_b1", RegisterTokens(), (torch.randn(1, 4, 6),), ["x"], ["y"], dynamo=True)

    # controls
    export(
        "clip_logits_ts_b2",
        ContrastiveLogits(),
        (torch.randn(2, 6), torch.randint(0, 10, (2, 3))),
        ["image", "text"],
        ["logits_per_image"],
    )
    export(
        "clip_logits_ts_dyn",
        ContrastiveLogits(),
        (torch.randn(2, 6), torch.randint(0, 10, (2, 3))),
        ["image", "text"],
        ["logits_per_image"],
        dynamic_axes={"image": {0: "batch"}, "text": {0: "batch"}, "logits_per_image": {0: "batch", 1: "batch"}},
    )
    export("first_sample_ref_ts_b1", FirstSampleRef(), (torch.randn(1, 6),), ["x"], ["y"])
    export(
        "first_sample_ref_ts_dyn",
        FirstSampleRef(),
        (torch.randn(2, 6),),
        ["x"],
        ["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
    )
    try:
        import torchvision  # noqa: F401

        export("batched_nms_ts_b1", BatchedNMS(), (torch.randn(1, 5, 4),), ["feats"], ["keep", "boxes"])
        export("batched_nms_ts_b2", BatchedNMS(), (torch.randn(2, 5, 4),), ["feats"], ["keep", "boxes"])
    except ImportError:
        print("no torchvision: batched_nms skipped")

    # int8 dynamic quantization of the BERT (ORT)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        onnx.save(bert, str(Path(folder) / "bert.onnx"))
        quantize_dynamic(str(Path(folder) / "bert.onnx"), str(Path(folder) / "int8.onnx"), weight_type=QuantType.QInt8)
        _saved[0](PACKAGE, "bert_addmask_ts_b1_int8.onnx", onnx.load(str(Path(folder) / "int8.onnx")))


def torch_families(save: Callable[[str, str, object], None], seed: int) -> None:
    """Every family above, through ``save(package, file name, model)``."""
    _saved[:] = [save]
    torch.manual_seed(seed)
    main()
