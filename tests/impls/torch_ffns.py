"""PyTorch FFNs for `permute-check --impl impls.torch_ffns:NAME`.

Position-wise ones (must pass): FeedForwardBlock, SwiGLU, TopKMoE, make_block, block, NoLinear,
Lazy, Prints, ReturnsTuple (its first output). The rest break position-wise behaviour in one
way each: they mix positions, depend on the position, change their input, or cannot run on a
single token. The sequence (token) axis is -2: inputs are (tokens, d_model) or
(batch, seq, d_model). Weights are PyTorch's default random init (unseeded).
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

# --- position-wise: must pass ------------------------------------------------------------


class FeedForwardBlock(nn.Module):
    """The lesson's class, copied from /work/shared/seeds/003_8ebfe536c47bdfb1.txt.

    Same attribute names (``linear_1``, ``dropout``, ``linear_2``) and order
    Linear -> ReLU -> Dropout -> Linear. Only addition: the default ``dropout=0.1``.
    In training mode (as built) the dropout is random; in eval mode it is position-wise.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.linear_1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        # (B,S,d) --> (B,S,d_ff) --> (B,S,d)
        return self.linear_2(self.dropout(torch.relu(self.linear_1(x))))


class SwiGLU(nn.Module):
    """LLaMA-style gated FFN: w2(silu(w1 x) * w3 x), no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)  # gate
        self.w3 = nn.Linear(d_model, d_ff, bias=False)  # up
        self.w2 = nn.Linear(d_ff, d_model, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TopKMoE(nn.Module):
    """Mixture of experts, top-k routing per token, no capacity limit: position-wise.

    Each token's output is the softmax (over its top-k router logits) weighted sum of its
    chosen experts' outputs. Accepts (..., d_model).
    """

    def __init__(self, d_model: int, d_ff: int, experts: int = 4, top_k: int = 2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d_model, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            for _ in range(experts)
        )

    def _capacity(self, tokens: int) -> int:
        return tokens  # no limit: every routed token is served

    def forward(self, x):
        lead, d_model = x.shape[:-1], x.shape[-1]
        h = x.reshape(-1, d_model)  # (tokens, d_model)
        top_logits, top_idx = self.router(h).topk(self.top_k, dim=-1)  # (tokens, k)
        weights = torch.softmax(top_logits, dim=-1)
        capacity = self._capacity(h.shape[0])
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            # tokens routed to expert e, in token order (a token picks an expert at most once)
            rows, slots = (top_idx == e).nonzero(as_tuple=True)
            rows, slots = rows[:capacity], slots[:capacity]  # tokens past capacity: dropped
            if rows.numel():
                y = expert(h[rows]) * weights[rows, slots].unsqueeze(-1)
                out = out.index_add(0, rows, y)
        return out.reshape(*lead, d_model)


class CapacityMoE(TopKMoE):
    """TopKMoE where each expert serves at most ``ceil(capacity_factor * tokens * top_k /
    experts)`` tokens, first come first served in token order; later tokens get zero from that
    expert. Not position-wise: the order of the tokens decides which ones are dropped.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        experts: int = 4,
        top_k: int = 2,
        capacity_factor: float = 0.5,
    ):
        super().__init__(d_model, d_ff, experts=experts, top_k=top_k)
        self.capacity_factor = capacity_factor

    def _capacity(self, tokens: int) -> int:
        return math.ceil(self.capacity_factor * tokens * self.top_k / len(self.experts))


def make_block() -> FeedForwardBlock:
    """A factory without parameters; the block it returns is in training mode."""
    return FeedForwardBlock(16, 32, dropout=0.1)


# A ready instance, in training mode as constructed.
block = FeedForwardBlock(16, 64, dropout=0.1)


# --- broken (or awkward) modules ----------------------------------------------------------
# Each registers an nn.Linear(d_model, ...) first, so d_model can be read from it.


class _FFN(nn.Module):
    """A plain Linear -> ReLU -> Linear, the base of the modules below."""

    def __init__(self, d_model: int = 16, d_ff: int = 32):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def ffn(self, x):
        return self.linear2(torch.relu(self.linear1(x)))

    def forward(self, x):
        return self.ffn(x)


class MeanMixer(_FFN):
    """Adds the mean over the sequence axis. Permuting the tokens only permutes the outputs
    (a mean has no order), but a token alone gives a different output than in the sequence.
    """

    def forward(self, x):
        return self.ffn(x) + x.mean(dim=-2, keepdim=True)


class CumSum(_FFN):
    """Cumulative sum over the sequence axis: each output depends on the tokens before it."""

    def forward(self, x):
        return self.ffn(x).cumsum(dim=-2)


class Conv3(_FFN):
    """Linear -> Conv1d(kernel 3, padding 1) along the sequence -> ReLU -> Linear: each output
    sees its neighbours. A 2-D input (tokens, d_model) is treated as one sequence."""

    def __init__(self, d_model: int = 16, d_ff: int = 32):
        super().__init__(d_model, d_ff)
        self.conv = nn.Conv1d(d_ff, d_ff, kernel_size=3, padding=1)

    def forward(self, x):
        h = self.linear1(x)
        squeeze = h.dim() == 2
        if squeeze:
            h = h.unsqueeze(0)  # (1, seq, d_ff)
        h = self.conv(h.transpose(-1, -2)).transpose(-1, -2)  # Conv1d wants (batch, ch, seq)
        if squeeze:
            h = h.squeeze(0)
        return self.linear2(torch.relu(h))


class SeqLayerNorm(_FFN):
    """A layer norm over the sequence axis (each feature normalised across positions, no
    affine). Permutation-equivariant like MeanMixer, but a token alone normalises to zero."""

    def forward(self, x):
        h = self.linear1(x)
        mean = h.mean(dim=-2, keepdim=True)
        std = h.std(dim=-2, unbiased=False, keepdim=True)
        h = (h - mean) / (std + 1e-5)
        return self.linear2(torch.relu(h))


class PositionEmbedding(_FFN):
    """Adds a learned embedding of the position (0, 1, ...) inside forward: identical tokens
    at different positions give different outputs."""

    def __init__(self, d_model: int = 16, d_ff: int = 32, max_len: int = 512):
        super().__init__(d_model, d_ff)  # the Linear layers are registered first
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, x):
        positions = torch.arange(x.shape[-2], device=x.device)
        return self.ffn(x + self.pos(positions))


class BatchNormFFN(_FFN):
    """Linear -> BatchNorm1d(d_ff) -> ReLU -> Linear over the flattened tokens.

    In training mode the batch statistics mix the tokens (and a single token raises
    "Expected more than 1 value per channel when training"); in eval mode it uses the running
    statistics and is position-wise.
    """

    def __init__(self, d_model: int = 16, d_ff: int = 32):
        super().__init__(d_model, d_ff)
        self.norm = nn.BatchNorm1d(d_ff)

    def forward(self, x):
        lead = x.shape[:-1]
        h = self.norm(self.linear1(x.reshape(-1, x.shape[-1])))
        return self.linear2(torch.relu(h)).reshape(*lead, -1)


class InPlace(_FFN):
    """Doubles its input in place (x.mul_(2)), then the FFN: the caller's tensor changes."""

    def forward(self, x):
        x.mul_(2)
        return self.ffn(x)


class ReturnsTuple(_FFN):
    """Returns (output, aux_loss) as Hugging Face / MoE blocks do; the output is
    position-wise, the auxiliary loss is a scalar over all tokens."""

    def forward(self, x):
        out = self.ffn(x)
        aux_loss = out.pow(2).mean()
        return out, aux_loss


class NoLinear(nn.Module):
    """Position-wise but with no nn.Linear (and no parameters): d_model cannot be inferred."""

    def forward(self, x):
        return torch.relu(x) * 2


class Lazy(nn.Module):
    """First layer nn.LazyLinear: in_features is unknown (0) until the first call."""

    def __init__(self, d_model: int = 16, d_ff: int = 32):
        super().__init__()
        self.linear1 = nn.LazyLinear(d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class Prints(_FFN):
    """A correct FFN that writes to stdout and stderr on every call: must still pass."""

    def forward(self, x):
        print("hello from forward")
        print("hello from forward", file=sys.stderr)
        return self.ffn(x)


def returns_the_class():
    """A factory returning the class, not an instance: a mistake, exit 2 with one line."""
    return SwiGLU


class WithDtype(SwiGLU):
    """SwiGLU with a ``.dtype`` property, as a Hugging Face module has (a torch.dtype)."""

    @property
    def dtype(self):
        return self.w1.weight.dtype
