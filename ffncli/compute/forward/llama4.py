"""Llama 4's text model in the forward: LLaMA's layers where most layers rotate (interleaved
pairs, Llama 3's scaling) and then take a weightless RMSNorm of each query and key head, and
attend within chunks of attention_chunk_size; every no_rope_layer_interval-th layer neither
rotates nor chunks and scales its queries by a temperature that grows with the position. The
FFN is a mixture of experts on the layers moe_layers (or interleave_moe_layer_step) names,
top-1 sigmoid routing whose weight scales the expert's input plus a shared expert always
added; the other layers a dense FFN of intermediate_size_mlp."""

from __future__ import annotations

from typing import Any

import numpy as np

from ffncli.compute.forward.families import Mixture
from ffncli.compute.forward.ops import Rope, rotary


class Llama4(Mixture):
    default_theta = 500000.0
    default_eps = 1e-5

    def _rope(self) -> Rope:
        return rotary(self.settings, self.head_dim, self.default_theta, interleaved=True)

    def rotated(self, i: int) -> bool:
        """no_rope_layers[i] (1: the layer rotates); without it, all but every
        no_rope_layer_interval-th layer (Llama4TextConfig's default)."""
        s = self.settings
        layers = s.data.get("no_rope_layers")
        if isinstance(layers, list) and layers:
            return bool(layers[i]) if i < len(layers) else True
        return (i + 1) % (s.whole("no_rope_layer_interval", 4, minimum=1) or 4) != 0

    def chunk(self, i: int) -> int | None:
        """attention_chunk_size on the layers layer_types names chunked_attention; without
        layer_types, on the rotated layers (when the size is not null)."""
        s = self.settings
        size = s.data.get("attention_chunk_size", 8192)
        types = s.data.get("layer_types")
        chunked = types[i] == "chunked_attention" if isinstance(types, list) \
            and i < len(types) else self.rotated(i) and size is not None
        return s.whole("attention_chunk_size", 8192, minimum=1) if chunked else None

    def _kinds(self, i: int) -> dict[str, Any]:
        s = self.settings
        kinds: dict[str, Any] = dict(rope=None, qk_eps=self.eps, chunk=self.chunk(i))
        if self.rotated(i):
            kinds["rope"] = self.rope
            if s.flag("use_qk_norm", True):
                ones = np.ones(self.head_dim, dtype=self.dtype)
                kinds |= dict(q_norm=ones, k_norm=ones, norm_after_rope=True)
        elif s.flag("attn_temperature_tuning", True):
            kinds["temperature"] = (s.number("floor_scale", 8192.0),
                                    s.number("attn_scale", 0.1))
        return kinds
