"""DeepSeek-V2, DeepSeek-V3 and GLM-4.5 (``glm4_moe``) in the forward, as transformers 5.25
computes them: LLaMA's pre-RMSNorm layers whose first ``first_k_dense_replace`` FFNs are dense
(``intermediate_size`` wide) and the rest a mixture of ``n_routed_experts`` experts routed by
the config's rule (:func:`ffncli.compute.build.routing_rule`: V3 and GLM-4.5 sigmoid scores
plus ``e_score_correction_bias`` for choosing, ``n_group``/``topk_group`` groups by the sum
of their two best, ``norm_topk_prob``, ``routed_scaling_factor``; V2 a softmax, its groups by
their best under ``topk_method`` group_limited_greedy, scaled, never renormalised) beside
``n_shared_experts`` shared ones. DeepSeek's attention is MLA
(:class:`ffncli.compute.forward.latent.LatentAttention`); GLM-4.5's is LLaMA's with Q/K/V
biases, optional per-head Q/K norms and half of each head rotated.

The multi-token-prediction layers (``num_nextn_predict_layers``: DeepSeek-V3's layer 61,
GLM-4.5's last) are not run, as transformers does not build them: the forward's final states
are the main model's."""

from __future__ import annotations

import math

from ffncli.compute.forward.families import Mixture
from ffncli.compute.forward.latent import LatentAttention, LowRank
from ffncli.compute.forward.layer import Block
from ffncli.compute.forward.ops import Array, Rope, rotary, softmax_scale


class Glm4Moe(Mixture):
    """GLM-4.5: Q/K/V biases (``attention_bias``, never on O), RMSNorms of each query and key
    head (``use_qk_norm``) before rotating the first ``partial_rotary_factor`` of each head
    (0.5 when the config has none), DeepSeek-V3's mixture of experts."""

    default_eps = 1e-5

    def _rope(self) -> Rope:
        return rotary(self.settings, self.head_dim, self.default_theta, default_partial=0.5)


class DeepseekV3(Mixture):
    """DeepSeek-V3: MLA with queries through q_lora_rank (or ``q_proj`` when it is null), the
    rotated pairs interleaved as ``rope_interleave`` says (default true), the softmax scale
    YaRN's mscale(factor, mscale_all_dim) squared over sqrt(nope + rope)."""

    def _interleaved(self) -> bool:
        return self.settings.flag("rope_interleave", True)

    def _rope(self) -> Rope:
        att = self.spec.attention
        assert att is not None  # checked by Transformer
        return rotary(self.settings, att.rope_head_dim, self.default_theta,
                      interleaved=self._interleaved())

    def layer(self, i: int) -> Block:
        self.check_layer(i)
        return Block(self._engine(i), self._latent(i),
                     self._norm(self.names["attn_norm"].format(i=i)),
                     self._norm(self.names["ffn_norm"].format(i=i)), False, self.scratch)

    def _latent(self, i: int) -> LatentAttention:
        """Layer i's MLA from its tensors: nn.Linear weights (out, in) passed as [in, out]."""
        att = self.spec.attention
        assert att is not None  # checked by Transformer
        d, h, rank = self.d_model, self.heads, att.kv_lora_rank or 0
        rot = att.rope_head_dim
        nope = (att.head_dim or 0) - rot
        v = att.v_head_dim or nope + rot

        def stem(key: str) -> str:
            return self.names[key].format(i=i)

        q: Array | LowRank
        if att.q_lora_rank:
            w_a, b_a = self._linear(stem("q_a"), att.q_lora_rank, d, att.qkv_bias)
            w_b, _ = self._linear(stem("q_b"), h * (nope + rot), att.q_lora_rank, False)
            q = LowRank(w_a.T, b_a, self._need(stem("q_a_norm"), (att.q_lora_rank,)), w_b.T)
        else:
            q = self._linear(stem("q"), h * (nope + rot), d, False)[0].T
        wkv_a, bkv_a = self._linear(stem("kv_a"), rank + rot, d, att.qkv_bias)
        wkv_b, _ = self._linear(stem("kv_b"), h * (nope + v), rank, False)
        wo, bo = self._linear(stem("o"), d, h * v, att.out_bias)
        return LatentAttention(q, wkv_a.T, bkv_a, self._need(stem("kv_a_norm"), (rank,)),
                               wkv_b.T, wo.T, bo, h, nope, rot, v,
                               softmax_scale(self.settings, 1 / math.sqrt(nope + rot)),
                               self.rope)


class DeepseekV2(DeepseekV3):
    """DeepSeek-V2: V3's layers, the rotated pairs always interleaved (transformers rotates
    them as complex numbers)."""

    def _interleaved(self) -> bool:
        return True
