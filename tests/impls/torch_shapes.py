"""PyTorch modules that trip the check's plumbing rather than its properties
(`permute-check --impl impls.torch_shapes:NAME`): one wants 3-D input, two return bfloat16
(one of them mixing positions), one cannot be copied to be cast."""

from __future__ import annotations

import threading

import torch

from .torch_ffns import _FFN


class Unpacks3D(_FFN):
    """``B, S, D = x.shape``: position-wise, but only on (batch, seq, d_model) input."""

    def forward(self, x):
        B, S, D = x.shape
        return super().forward(x.reshape(B * S, D)).reshape(B, S, -1)


class ReturnsBfloat16(_FFN):
    """Position-wise, its output rounded to bfloat16 (autocast, a bfloat16 head)."""

    def forward(self, x):
        return super().forward(x).to(torch.bfloat16)


class MixesInBfloat16(_FFN):
    """Adds the mean over the sequence axis, then rounds to bfloat16: not position-wise."""

    def forward(self, x):
        y = super().forward(x)
        return (y + y.mean(dim=-2, keepdim=True)).to(torch.bfloat16)


class Uncopyable(_FFN):
    """Holds a lock, which copy.deepcopy cannot copy: casting it must not be blamed on it."""

    def __init__(self, d_model: int = 16, d_ff: int = 32):
        super().__init__(d_model, d_ff)
        self.lock = threading.Lock()
