"""The torch modules of the ``torch-families`` corpus package (``generate_torch_families.py`` exports them):
tiny, random weights, each a family users export and re-batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- 1. decoder step with a KV cache
class DecoderStep(nn.Module):
    """GPT-like single step: input_ids [B, 1], past_key/past_value [B, h, P, d], attention_mask [B, P+1],
    position_ids [B, 1]; HF-style additive mask (1 - m) * finfo.min; present = cat(past, new)."""

    def __init__(self, vocab=16, heads=2, dim=4, positions=8):
        super().__init__()
        self.heads, self.dim = heads, dim
        width = heads * dim
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.qkv, self.out, self.head = nn.Linear(width, 3 * width), nn.Linear(width, width), nn.Linear(width, vocab)
        self.norm = nn.LayerNorm(width)

    def forward(self, input_ids, past_key, past_value, attention_mask, position_ids):
        b, t = input_ids.shape
        h = self.tok(input_ids) + self.pos(position_ids)
        q, k, v = self.qkv(self.norm(h)).split(self.heads * self.dim, dim=-1)
        q = q.view(b, t, self.heads, self.dim).transpose(1, 2)
        k = torch.cat([past_key, k.view(b, t, self.heads, self.dim).transpose(1, 2)], dim=2)
        v = torch.cat([past_value, v.view(b, t, self.heads, self.dim).transpose(1, 2)], dim=2)
        scores = q @ k.transpose(-1, -2) / self.dim**0.5
        mask = (1.0 - attention_mask[:, None, None, :].to(scores.dtype)) * torch.finfo(scores.dtype).min
        attn = (scores + mask).softmax(-1) @ v
        attn = attn.transpose(1, 2).reshape(b, t, self.heads * self.dim)
        return self.head(h + self.out(attn)), k, v


def kv_inputs(b=1, past=3):
    return (
        torch.randint(0, 16, (b, 1)),
        torch.randn(b, 2, past, 4),
        torch.randn(b, 2, past, 4),
        torch.ones(b, past + 1, dtype=torch.long),
        torch.full((b, 1), past, dtype=torch.long),
    )


KV_NAMES = ["input_ids", "past_key", "past_value", "attention_mask", "position_ids"]
KV_OUT = ["logits", "present_key", "present_value"]


# ---------------------------------------------------------------- 2. BERT-like with token_type_ids + 4-D mask
class TinyBert(nn.Module):
    def __init__(self, vocab=20, width=8, heads=2, length=6):
        super().__init__()
        self.heads, self.width = heads, width
        self.tok, self.typ, self.pos = nn.Embedding(vocab, width), nn.Embedding(2, width), nn.Embedding(length, width)
        self.ln0, self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.o = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.ff = nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, width))
        self.pool = nn.Linear(width, width)

    def forward(self, input_ids, token_type_ids, attention_mask):
        b, t = input_ids.shape
        positions = torch.arange(t, device=input_ids.device).unsqueeze(0).expand(b, t)
        h = self.ln0(self.tok(input_ids) + self.typ(token_type_ids) + self.pos(positions))
        ext = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2) / 2.0 + ext).softmax(-1) @ v
        h = self.ln1(h + self.o(a.transpose(1, 2).reshape(b, t, -1)))
        h = self.ln2(h + self.ff(h))
        return h, torch.tanh(self.pool(h[:, 0]))


# ---------------------------------------------------------------- 3. sequence-first MHA with key_padding_mask
class SeqFirstMHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2)  # batch_first=False

    def forward(self, x, key_padding_mask):
        y, w = self.mha(x, x, x, key_padding_mask=key_padding_mask)
        return y, w


# ---------------------------------------------------------------- 4. LSTM / GRU with explicit states
class LSTMState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 6, num_layers=2, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return self.head(y), h, c


class GRUSeqFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 6, num_layers=1, bidirectional=True)

    def forward(self, x, h0):
        y, h = self.gru(x, h0)
        return y, h


# ---------------------------------------------------------------- 5. CTC recognizer, output [T, B, C]
class CTCRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)))
        self.rnn = nn.LSTM(4 * 4, 8, bidirectional=True)
        self.fc = nn.Linear(16, 7)

    def forward(self, image):  # [B, 1, 8, W]
        f = self.conv(image)  # [B, 4, 4, W]
        b, c, h, w = f.shape
        f = f.permute(3, 0, 1, 2).reshape(w, b, c * h)  # [T, B, F]
        y, _ = self.rnn(f)
        return self.fc(y).log_softmax(-1)


# ---------------------------------------------------------------- 6. UNet: interpolate by scale and by size
class TinyUNet(nn.Module):
    def __init__(self, by_size: bool):
        super().__init__()
        self.by_size = by_size
        self.e1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.SiLU())
        self.e2 = nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.d1 = nn.Conv2d(12, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        s = self.e1(x)
        d = self.e2(s)
        if self.by_size:
            u = F.interpolate(d, size=s.shape[-2:], mode="bilinear", align_corners=False)
        else:
            u = F.interpolate(d, scale_factor=2.0, mode="nearest")
        return self.out(F.silu(self.d1(torch.cat([u, s], 1))))


# ---------------------------------------------------------------- 7. LayerNorm over [C, H, W], view(B, -1)
class LNCHW(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.ln = nn.LayerNorm([4, 6, 6])
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        h = self.ln(self.conv(x))
        return self.fc(h.view(h.size(0), -1))


# ---------------------------------------------------------------- 8. einops-style patchify/unpatchify
class Patchify(nn.Module):
    def __init__(self, p=2):
        super().__init__()
        self.p = p
        self.proj = nn.Linear(3 * p * p, 3 * p * p)

    def forward(self, x):  # b c (h p1) (w p2) -> b (h w) (p1 p2 c) -> back
        b, c, hh, ww = x.shape
        p = self.p
        t = (
            x.reshape(b, c, hh // p, p, ww // p, p)
            .permute(0, 2, 4, 3, 5, 1)
            .reshape(-1, (hh // p) * (ww // p), p * p * c)
        )
        t = self.proj(t)
        y = t.reshape(-1, hh // p, ww // p, p, p, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, hh, ww)
        return y


# ---------------------------------------------------------------- 9. scalar temperature input
class Temperature(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x, temperature):
        return (self.fc(x) / temperature).softmax(-1)


# ---------------------------------------------------------------- 10. detection postprocess: TopK + GatherElements
class DetTopK(nn.Module):
    def __init__(self, k=5):
        super().__init__()
        self.k = k
        self.backbone = nn.Conv2d(3, 4 + 3, 3, padding=1)  # 4 box + 3 classes per location

    def forward(self, image):
        f = self.backbone(image).flatten(2).transpose(1, 2)  # [B, A, 7]
        boxes, logits = f[..., :4], f[..., 4:]
        scores, labels = logits.sigmoid().max(-1)  # [B, A]
        top, idx = scores.topk(self.k, dim=1)
        sel = torch.gather(boxes, 1, idx.unsqueeze(-1).expand(-1, -1, 4))
        return sel, top, torch.gather(labels, 1, idx)


# ---------------------------------------------------------------- 11. RT-DETR-like postprocess with orig_target_sizes
class RTDETRPost(nn.Module):
    def __init__(self, queries=6, classes=3, k=4):
        super().__init__()
        self.q, self.c, self.k = queries, classes, k
        self.feat = nn.Conv2d(3, 8, 4, stride=4)
        self.query = nn.Parameter(torch.randn(1, queries, 8))
        self.cls, self.box = nn.Linear(8, classes), nn.Linear(8, 4)

    def forward(self, images, orig_target_sizes):
        mem = self.feat(images).flatten(2).transpose(1, 2)  # [B, S, 8]
        q = self.query.repeat(images.shape[0], 1, 1)
        h = (q @ mem.transpose(1, 2)).softmax(-1) @ mem + q
        logits, boxes = self.cls(h), self.box(h).sigmoid()  # [B, Q, C], [B, Q, 4]
        cx, cy, w, hh = boxes.unbind(-1)
        xyxy = torch.stack([cx - w / 2, cy - hh / 2, cx + w / 2, cy + hh / 2], -1)
        xyxy = xyxy * orig_target_sizes.repeat(1, 2).unsqueeze(1)
        scores = logits.sigmoid().flatten(1)
        scores, index = torch.topk(scores, self.k, dim=-1)
        labels = index % self.c
        index = torch.div(index, self.c, rounding_mode="floor")
        picked = xyxy.gather(dim=1, index=index.unsqueeze(-1).repeat(1, 1, 4))
        return labels, picked, scores


# ---------------------------------------------------------------- 12. cls/register token from new_zeros + arange positions
class RegisterTokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(8, 6)
        self.fc = nn.Linear(6, 6)

    def forward(self, x):  # [B, T, 6]
        b, t, d = x.shape
        reg = x.new_zeros(x.size(0), 1, d)
        ids = torch.arange(t + 1, device=x.device).unsqueeze(0).expand(b, -1)
        h = torch.cat([reg, x], 1) + self.pos(ids)
        return self.fc(h)[:, 0]


# ---------------------------------------------------------------- 13. controls (not batchable)
class ContrastiveLogits(nn.Module):  # CLIP-style: logits_per_image = img @ txt.T, [B, B]
    def __init__(self):
        super().__init__()
        self.img, self.txt = nn.Linear(6, 4), nn.Embedding(10, 4)

    def forward(self, image, text):
        a = F.normalize(self.img(image), dim=-1)
        t = F.normalize(self.txt(text).mean(1), dim=-1)
        return a @ t.t() * 10.0


class FirstSampleRef(nn.Module):  # x - x[0]: distance to the first sample (reference frame)
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        h = self.fc(x)
        return h - h[0]


class BatchedNMS(nn.Module):  # torchvision batched_nms over the batch's boxes: selected indices of all images
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 5)

    def forward(self, feats):  # [B, N, 4]
        from torchvision.ops import nms

        out = self.fc(feats)
        boxes = torch.cat([out[..., :2], out[..., :2] + out[..., 2:4].abs() + 0.1], -1)  # [B, N, 4]
        scores = out[..., 4].sigmoid()
        b, _n, _ = boxes.shape
        offsets = torch.arange(b).to(boxes).view(b, 1, 1) * 100.0
        flat = (boxes + offsets).reshape(-1, 4)
        keep = nms(flat, scores.reshape(-1), 0.5)
        return keep, flat[keep]
