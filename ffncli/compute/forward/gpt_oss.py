"""gpt-oss in the forward: LLaMA's layers with attention biases, a learned sink logit per
query head, sliding-window and full layers alternating (layer_types), YaRN rotation, and a
mixture of experts in every layer (the clamped SwiGLU, its gate and up interleaved, biases
everywhere, a softmax over the chosen logits: :func:`ffncli.compute.build.activation` and
``ROUTING``)."""

from __future__ import annotations

from typing import Any

from ffncli.compute.forward.families import Mixture
from ffncli.compute.forward.ops import Rope, rotary


class GptOss(Mixture):
    default_theta = 150000.0
    default_eps = 1e-5

    def _rope(self) -> Rope:
        return rotary(self.settings, self.head_dim, self.default_theta)

    def window(self, i: int) -> int | None:
        """sliding_window on the layers layer_types names sliding_attention; without
        layer_types, on the even layers (GptOssConfig's default)."""
        s = self.settings
        types = s.data.get("layer_types")
        sliding = types[i] == "sliding_attention" if isinstance(types, list) \
            and i < len(types) else i % 2 == 0
        return s.whole("sliding_window", 128, minimum=1) if sliding else None

    def _kinds(self, i: int) -> dict[str, Any]:
        sinks = self._need(self.names["sinks"].format(i=i), (self.heads,))
        return dict(super()._kinds(i), sinks=sinks)
