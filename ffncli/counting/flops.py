"""FLOPs per token: 2 per multiply-add of the matrix products (biases, activations, norms and
softmax are left out, as in Kaplan et al. 2020)."""

from __future__ import annotations

from ffncli.base import record
from ffncli.counting.parts import (
    attention_widths,
    latent_attention_matrices,
    output_projections,
    query_projections,
    shared_router_params,
    span_conv_matrices,
    value_widths,
)
from ffncli.specs.spec import AttentionSpec, FfnSpec


def ffn_flops(d_model: int, ffn: FfnSpec) -> int:
    """The matrix products one token goes through: top-k experts, the router, a shared expert."""
    matrices = 3 if ffn.gated else 2
    per_expert = matrices * d_model * ffn.d_ff // ffn.groups
    router = d_model * ffn.experts + shared_router_params(d_model, ffn) if ffn.is_moe else 0
    if ffn.is_moe and ffn.router_mlp:  # ZAYA's
        router = router_mlp_macs(d_model, ffn)
    shared = matrices * d_model * ffn.shared_d_ff + (d_model if ffn.shared_gate else 0)
    adapter = 2 * d_model * ffn.adapter_d_ff if ffn.adapters else 0  # the token's language's
    receptance = d_model * d_model if ffn.channel_mix else 0  # RWKV
    return 2 * (ffn.stack * (ffn.top_k * (per_expert + receptance) + router + shared)
                + adapter)


def router_mlp_macs(d_model: int, ffn: FfnSpec) -> int:
    """ZAYA's router MLP, one token: d_model -> r, r -> r twice, r -> experts + zero experts
    (r = router_mlp)."""
    r = ffn.router_mlp
    return d_model * r + 2 * r * r + r * (ffn.experts + ffn.zero_experts)


def attention_projection_flops(d_model: int, att: AttentionSpec) -> int:
    if att.kv_lora_rank:
        return 2 * sum(n_in * n_out for _, n_in, n_out, _ in
                       latent_attention_matrices(d_model, att))
    q_width, kv_width = attention_widths(d_model, att)
    v_width, o_width = value_widths(d_model, att)
    gate = d_model * q_width if att.output_gate else 0
    gate += d_model * att.heads if att.head_gate else 0  # a gate a head (LFM3, Laguna)
    extra = att.extra_projections * d_model * q_width
    extra += d_model * (att.qsa_heads + 1) * att.qsa_head_dim if att.qsa_heads else 0  # QSA
    conv = sum(weights for _, _, weights, _ in span_conv_matrices(d_model, att))
    no_v = 2 * d_model * v_width if att.values_are_keys else 0  # W_K is also W_V
    q_and_o = sum(n_in * n_out for _, n_in, n_out, _ in query_projections(d_model, att, q_width)
                  + output_projections(d_model, att, o_width))  # each maybe factored
    return 2 * (q_and_o + d_model * (kv_width + v_width) + gate + extra + conv) - no_v


def attention_score_flops(d_model: int, att: AttentionSpec, seq_len: int) -> int:
    """Q K^T and the weighted sum of V, one token against seq_len positions."""
    if att.kv_lora_rank:
        v_head_dim = att.v_head_dim or att.head_dim or 0
        return 2 * seq_len * att.heads * ((att.head_dim or 0) + v_head_dim)
    q_width, _ = attention_widths(d_model, att)
    return 2 * seq_len * (q_width + value_widths(d_model, att)[1])


@record
class Flops:
    """Forward FLOPs per token: the FFN's, attention's projections' and its scores'."""

    ffn: int
    attention_projections: int
    attention_scores: int

    @property
    def total(self) -> int:
        return self.ffn + self.attention_projections + self.attention_scores

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 1.0
