"""The torch exports of the corpus (``generate.py torch``): what TorchScript and dynamo write.

Sequence-first attention (the batch on axis 1), models that couple samples, float16 and double I/O,
arange(B) in advanced indexing (folded into a constant by both exporters), a GRU started from
``torch.zeros(1, B, H)`` (dynamo folds it into a constant state), and layers as model-local functions.
Each at the batch a user exports with; ``generate.py`` writes them (``save``) with the corpus's seed.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path


def _torch_export(module: object, args: tuple, names: list[str], outputs: list[str], **options: object) -> object:
    import onnx
    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs, **options)
        return onnx.load(str(path))


def torch_models(save: Callable[[str, str, object], None], seed: int) -> None:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    # sequence-first attention ([T, N, E], the batch on axis 1), exported at batch 1
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0).eval()
    tokens = torch.randn(6, 1, 16)
    with torch.no_grad():
        model = _torch_export(layer, (tokens,), ["src"], ["out"], dynamo=True, optimize=True)
    save("torch", "seqfirst_encoder_dynamo.onnx", model)
    time = torch.export.Dim("time", min=2, max=64)
    with torch.no_grad():
        model = _torch_export(
            layer, (tokens,), ["src"], ["out"], dynamo=True, optimize=True, dynamic_shapes={"src": {0: time}}
        )
    save("torch", "seqfirst_encoder_dynamo_dyntime.onnx", model)
    attention = nn.MultiheadAttention(16, 4).eval()

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = attention

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x, x, x, need_weights=False)[0]

    with torch.no_grad():
        model = _torch_export(SelfAttention().eval(), (tokens,), ["x"], ["y"], dynamo=True, optimize=True)
    save("torch", "seqfirst_mha_dynamo.onnx", model)

    # samples coupled: centering by the batch mean; BatchNorm exported in training mode
    class Center(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x - x.mean(dim=0, keepdim=True))

    sample = torch.randn(2, 8)
    model = _torch_export(
        Center().eval(), (sample,), ["x"], ["y"], dynamo=False, opset_version=17, dynamic_axes={"x": {0: "N"}}
    )
    save("torch", "batch_mean_center.onnx", model)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).train()
    model = _torch_export(
        net,
        (torch.randn(2, 3, 8, 8),),
        ["x"],
        ["y"],
        dynamo=False,
        opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
    )
    save("torch", "batchnorm_training.onnx", model)

    # float16 and double through and through, at a static batch 1
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    model = _torch_export(
        mlp.double(), (torch.randn(1, 8, dtype=torch.float64),), ["x"], ["y"], dynamo=False, opset_version=17
    )
    save("torch", "mlp_double_b1.onnx", model)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    model = _torch_export(
        mlp.half(), (torch.randn(1, 8, dtype=torch.float16),), ["x"], ["y"], dynamo=False, opset_version=17
    )
    save("torch", "mlp_fp16_b1.onnx", model)

    class HalfIO(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.head = nn.Linear(4 * 8 * 8, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = torch.relu(self.conv(x.float()))
            return self.head(hidden.reshape(1, -1)).half()

    model = _torch_export(
        HalfIO().eval(), (torch.randn(1, 3, 8, 8).half(),), ["x"], ["y"], dynamo=False, opset_version=17
    )
    save("torch", "cnn_fp16_io_b1.onnx", model)

    class Pool(nn.Module):  # advanced indexing by arange(B) at batch 1: the exporters fold it into a constant [0]
        def __init__(self, flat: bool) -> None:
            super().__init__()
            self.lin, self.flat = nn.Linear(16, 8), flat

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            hidden = self.lin(x)
            batch, steps = hidden.shape[0], hidden.shape[1]
            if self.flat:
                return hidden.reshape(batch * steps, 8)[torch.arange(batch) * steps + lengths - 1]
            return hidden[torch.arange(batch), lengths - 1]

    example = (torch.randn(1, 5, 16), torch.tensor([3]))
    for (stem, flat), dynamo in itertools.product((("arange_pool", False), ("arange_flat", True)), (False, True)):
        made = _torch_export(Pool(flat).eval(), example, ["x", "lengths"], ["y"], dynamo=dynamo)
        save("torch", f"{stem}_{'dynamo' if dynamo else 'ts'}.onnx", made)

    class Recurrent(nn.Module):  # torch.zeros(1, B, H) as the GRU's first state: dynamo folds it at batch 1
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 6, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            output, _ = self.gru(x, torch.zeros(1, x.shape[0], 6))
            return output[:, -1]

    for dynamo in (False, True):
        made = _torch_export(Recurrent().eval(), (torch.randn(1, 5, 8),), ["x"], ["y"], dynamo=dynamo)
        save("torch", f"gru_zeros_state_{'dynamo' if dynamo else 'ts'}.onnx", made)

    class OneHot(nn.Module):  # torch.zeros(B, C).scatter_(1, ...) at batch 1: a constant [1, 5] to scatter into
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(5, 3)

        def forward(self, label: torch.Tensor) -> torch.Tensor:
            hot = torch.zeros(label.shape[0], 5).scatter_(1, label.view(-1, 1), 1.0)
            return self.head(hot)

    class ClassToken(nn.Module):  # cls.expand(B, -1, -1): TorchScript computes the Expand's shape from constants
        def __init__(self) -> None:
            super().__init__()
            self.cls = nn.Parameter(torch.randn(1, 1, 8))
            self.lin = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            joined = torch.cat([self.cls.expand(x.shape[0], -1, -1), self.lin(x)], dim=1)
            return joined.softmax(-1)

    for dynamo in (False, True):
        kind = "dynamo" if dynamo else "ts"
        made = _torch_export(OneHot().eval(), (torch.tensor([2]),), ["label"], ["y"], dynamo=dynamo)
        save("torch", f"one_hot_scatter_{kind}.onnx", made)
        made = _torch_export(ClassToken().eval(), (torch.randn(1, 4, 8),), ["x"], ["y"], dynamo=dynamo)
        save("torch", f"cls_token_expand_{kind}.onnx", made)

    class MaskedPool(
        nn.Module
    ):  # integer inputs init must read: a mask compared with 0 and cast, ids after a start token
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(20, 8)

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            start = torch.full((ids.shape[0], 1), 2, dtype=torch.long)
            hidden = self.embed(torch.cat([start, ids], 1))[:, 1:]
            hidden = hidden.masked_fill(mask.unsqueeze(-1) == 0, 0.0)
            return hidden.sum(1) / mask.unsqueeze(-1).float().sum(1).clamp(min=1.0)

    class GatherStep(nn.Module):  # torch.gather(h, 1, idx.view(B, 1, 1).expand(B, 1, D)): GatherElements indices
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            hidden = self.lin(x)
            return torch.gather(hidden, 1, idx.view(-1, 1, 1).expand(-1, 1, 8)).squeeze(1)

    ids, mask = torch.tensor([[3, 5, 7, 2, 1, 1]]), torch.tensor([[1, 1, 1, 1, 0, 0]])
    for dynamo in (False, True):
        kind = "dynamo" if dynamo else "ts"
        made = _torch_export(MaskedPool().eval(), (ids, mask), ["ids", "mask"], ["y"], dynamo=dynamo)
        save("torch", f"masked_pool_{kind}.onnx", made)
        made = _torch_export(
            GatherStep().eval(), (torch.randn(1, 6, 8), torch.tensor([2])), ["x", "idx"], ["y"], dynamo=dynamo
        )
        save("torch", f"gather_step_{kind}.onnx", made)

    class Uint8Image(nn.Module):  # a uint8 image cast and scaled: init must not ask for a .npy, nor call it a mask
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, stride=2)
            self.head = nn.Linear(4 * 3 * 3, 5)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            features = self.conv(image.float() / 255.0)
            return self.head(features.flatten(1))

    class FirstRows(nn.Module):  # x.flatten(0, 1)[arange(B) * T]: the arange folds into the constant [0]
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows = torch.arange(x.shape[0]) * x.shape[1]
            return x.flatten(0, 1)[rows].relu()

    class ExpandedState(nn.Module):  # h0.expand(-1, B, -1) of a parameter: TorchScript keeps an Expand of constants
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 8, batch_first=True)
            self.h0 = nn.Parameter(torch.randn(1, 1, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gru(x, self.h0.expand(-1, x.shape[0], -1).contiguous())[0]

    image = torch.randint(0, 256, (1, 3, 8, 8), dtype=torch.uint8)
    for dynamo in (False, True):
        kind = "dynamo" if dynamo else "ts"
        made = _torch_export(Uint8Image().eval(), (image,), ["image"], ["y"], dynamo=dynamo)
        save("torch", f"uint8_image_{kind}.onnx", made)
        made = _torch_export(FirstRows().eval(), (torch.randn(1, 6, 8),), ["x"], ["y"], dynamo=dynamo)
        save("torch", f"first_rows_{kind}.onnx", made)
        made = _torch_export(ExpandedState().eval(), (torch.randn(1, 5, 8),), ["x"], ["y"], dynamo=dynamo)
        save("torch", f"expanded_state_{kind}.onnx", made)
    audio_models(save, seed)
    function_models(save, seed)


def audio_models(save: Callable[[str, str, object], None], seed: int) -> None:
    """Audio front ends and lengths: a log-mel STFT with batch and samples dynamic (dynamo), and conv
    subsampling whose frame lengths come from the input lengths by a floor division, then mask the frames
    (TorchScript folds the positions into a constant at batch 1; dynamo spells the division out)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class LogMel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("window", torch.hann_window(256))
            self.mel = nn.Linear(129, 16)

        def forward(self, waveform: torch.Tensor) -> torch.Tensor:
            spec = torch.stft(waveform, 256, hop_length=64, window=self.window, return_complex=True)
            return self.mel(spec.abs().pow(2).transpose(1, 2)).clamp(min=1e-6).log()

    class SubsampledLengths(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(8, 8, 3, stride=2)

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.conv(x.transpose(1, 2)).transpose(1, 2)
            frames = (lengths - 3) // 2 + 1
            mask = torch.arange(y.shape[1])[None, :] < frames[:, None]
            return y.masked_fill(~mask[..., None], 0.0), frames

    batch, samples = torch.export.Dim("batch", min=2), torch.export.Dim("samples", min=512, max=100000)
    made = _torch_export(
        LogMel().eval(), (torch.randn(2, 1600),), ["waveform"], ["features"], dynamo=True,
        dynamic_shapes={"waveform": {0: batch, 1: samples}},
    )  # fmt: skip
    save("torch", "logmel_stft_dynamo_dyn.onnx", made)
    inputs = (torch.randn(1, 20, 8), torch.tensor([15]))
    for dynamo in (False, True):
        kind = "dynamo" if dynamo else "ts"
        made = _torch_export(SubsampledLengths().eval(), inputs, ["x", "lengths"], ["y", "frames"], dynamo=dynamo)
        save("torch", f"subsampled_lengths_{kind}.onnx", made)


def function_models(save: Callable[[str, str, object], None], seed: int) -> None:
    """Layers as model-local functions (TorchScript's ``export_modules_as_functions``): two calls of a
    ``Block`` function, then a head that flattens with ``reshape(1, -1, 8)`` traced at batch 1."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(torch.relu(self.linear(x))) + x

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second, self.head = Block(), Block(), nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.second(self.first(x)).reshape(1, -1, 8).mean(1))

    made = _torch_export(
        Stack().eval(), (torch.randn(1, 5, 8),), ["x"], ["y"], dynamo=False, opset_version=17,
        export_modules_as_functions={Block},
    )  # fmt: skip
    save("torch", "local_functions_ts.onnx", made)
