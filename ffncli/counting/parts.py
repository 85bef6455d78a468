"""One formula a part of a layer: linear layers, FFNs and experts, the router, attention's
widths and latent matrices, norms. Pure integer arithmetic.

Counting follows the reference implementations (Hugging Face classes, the 2017 paper): tied
weights are counted once, buffers never.
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.base import record
from ffncli.specs.spec import AttentionSpec, FfnSpec, LayerKind, ModelSpec, NormSpec


@record
class Row:
    """One line of a breakdown: a named weight, its shape and its parameter count."""

    name: str
    shape: str
    params: int


def linear(n_in: int, n_out: int, bias: bool) -> int:
    """x W + b with W of shape (n_in, n_out)."""
    return n_in * n_out + (n_out if bias else 0)


# Activations with learned parameters of their own in each FFN: xIELU's alpha_p and alpha_n
# (its beta and eps are buffers).
LEARNED_ACTIVATIONS = {"xielu": 2}


def activation_params(ffn: FfnSpec) -> int:
    """The activation's own learned scalars, one set per FFN (0 for a fixed function)."""
    return LEARNED_ACTIVATIONS.get(ffn.activation, 0)


def grouped(n_in: int, n_out: int, bias: bool, groups: int) -> int:
    """A grouped 1x1 convolution (SqueezeBERT): each of groups blocks maps n_in / groups
    inputs to n_out / groups outputs; a linear layer when groups is 1."""
    return n_in * n_out // groups + (n_out if bias else 0)


def expert_params(d_model: int, ffn: FfnSpec) -> int:
    """One FFN: W1, W2 (and V when gated), with their biases, and the activation's scalars."""
    up = grouped(d_model, ffn.d_ff, ffn.bias, ffn.groups)
    down = grouped(ffn.d_ff, d_model, down_bias(ffn), ffn.groups)
    return (2 * up if ffn.gated else up) + down + channel_mix_params(d_model, ffn) \
        + activation_params(ffn) + hidden_scale_params(ffn)


def hidden_scale_params(ffn: FfnSpec) -> int:
    """Learned vectors of d_ff scaling the FFN's hidden (Dory's suv_gate and suv_up, one on
    each of x W and x V)."""
    return ffn.hidden_scales * ffn.d_ff


def channel_mix_params(d_model: int, ffn: FfnSpec) -> int:
    """RWKV's channel mixing beside its FFN: the receptance R (d x d) and two token-shift
    mixing vectors."""
    return d_model * d_model + 2 * d_model if ffn.channel_mix else 0


def down_bias(ffn: FfnSpec) -> bool:
    """Whether W2 has a bias: as the FFN's other projections, unless down_bias says (GTE)."""
    return ffn.bias if ffn.down_bias is None else ffn.down_bias


def router_params(d_model: int, ffn: FfnSpec) -> int:
    """The router scores every expert, zero (identity) experts included, and with
    router_shared the shared experts too (Inkling); router_scales adds Gemma 4's scales."""
    if ffn.is_moe and ffn.router_mlp:  # ZAYA's
        return router_mlp_params(d_model, ffn)
    return linear(d_model, ffn.experts + ffn.zero_experts, ffn.router_bias) \
        + shared_router_params(d_model, ffn) + router_scale_params(d_model, ffn) \
        if ffn.is_moe else 0


def router_mlp_params(d_model: int, ffn: FfnSpec) -> int:
    """ZAYA's router (ZayaRouter, ZayaRouterMLP) through r = router_mlp channels: down_proj
    d_model -> r with a bias, fc1 and fc2 r -> r with biases, out_proj r -> experts + zero
    experts without; with router_states, the scale of r on the previous layer's router state.
    Its RMSNorm of r is a norm (router_norm_params)."""
    r = ffn.router_mlp
    return linear(d_model, r, True) + 2 * linear(r, r, True) \
        + linear(r, ffn.experts + ffn.zero_experts, False) + (r if ffn.router_states else 0)


def router_norm_params(ffn: FfnSpec) -> int:
    """The RMSNorm of router_mlp channels inside ZAYA's router MLP (counted with the norms)."""
    return ffn.router_mlp if ffn.is_moe else 0


def router_scale_params(d_model: int, ffn: FfnSpec) -> int:
    """Gemma 4's router: a per-channel scale on its input and a scale per expert."""
    return d_model + ffn.experts if ffn.router_scales else 0


def shared_router_params(d_model: int, ffn: FfnSpec) -> int:
    """Inkling's router (router_shared): a row for each shared expert (shared_d_ff / d_ff of
    them) and one learned scale."""
    return d_model * (ffn.shared_d_ff // ffn.d_ff) + 1 if ffn.router_shared else 0


def shared_expert_params(d_model: int, ffn: FfnSpec) -> int:
    """The shared expert every token goes through (an FFN of width shared_d_ff, gated as the
    routed experts are), and its gate, a d_model -> 1 projection without bias (Qwen2-MoE)."""
    if not ffn.shared_d_ff:
        return 0
    shared = expert_params(d_model, FfnSpec(d_ff=ffn.shared_d_ff, gated=ffn.gated,
                                            bias=ffn.bias))
    return shared + (d_model if ffn.shared_gate else 0)


def adapter_params(d_model: int, ffn: FfnSpec) -> int:
    """X-MOD's language adapters after the FFN: per language d -> adapter_d_ff -> d, biases."""
    return ffn.adapters * (linear(d_model, ffn.adapter_d_ff, True)
                           + linear(ffn.adapter_d_ff, d_model, True))


def expert_norm_params(d_model: int, ffn: FfnSpec) -> tuple[int, int]:
    """Ergo's RMSNorm of d_model after each routed expert and after the shared expert, counted
    with the layer's norms: (all of them, those one token uses: its top-k experts' and the
    shared expert's)."""
    if not ffn.expert_norm:
        return 0, 0
    shared = d_model if ffn.shared_d_ff else 0
    return ffn.experts * d_model + shared, ffn.top_k * d_model + shared


def output_bias_params(d_model: int, ffn: FfnSpec) -> int:
    """A bias of d_model on the experts' summed output (JetMoE's MoE)."""
    return d_model if ffn.output_bias else 0


def ffn_params(d_model: int, ffn: FfnSpec) -> int:
    return ffn.stack * (ffn.experts * expert_params(d_model, ffn) + router_params(d_model, ffn)
                        + shared_expert_params(d_model, ffn)) + adapter_params(d_model, ffn) \
        + output_bias_params(d_model, ffn)


def ffn_active_params(d_model: int, ffn: FfnSpec) -> int:
    """What one token uses: its top-k experts, the router and any shared expert (and every
    language adapter: the input, not a router, picks one, as transformers counts them)."""
    return ffn.stack * (ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)
                        + shared_expert_params(d_model, ffn)) + adapter_params(d_model, ffn) \
        + output_bias_params(d_model, ffn)


def ffn_active_min_params(d_model: int, ffn: FfnSpec) -> int:
    """What one token uses at the least: as many of its top-k choices as there are zero
    (identity) experts go to them and cost nothing (LongCat-Flash); without zero experts,
    ffn_active_params."""
    unused = min(ffn.top_k, ffn.zero_experts) * expert_params(d_model, ffn)
    return ffn_active_params(d_model, ffn) - unused


def attention_widths(d_model: int, att: AttentionSpec) -> tuple[int, int]:
    """(width of Q and of the output projection's input, width of K and of V)."""
    head_dim = att.head_dim or d_model // att.heads
    return att.heads * head_dim, (att.kv_heads or att.heads) * head_dim


def head_expert_width(d_model: int, att: AttentionSpec) -> int:
    """A mixture of attention heads (JetMoE): the width of one bank's queries and of its W_O's
    input, the heads a token uses split among its head_top_k banks."""
    return attention_widths(d_model, att)[0] // att.head_top_k


def unused_head_experts_params(d_model: int, att: AttentionSpec) -> int:
    """A mixture of attention heads: the W_Q and W_O of the banks a token does not use (their
    router, output bias and the shared K and V are used)."""
    if not att.head_experts:
        return 0
    unused = att.head_experts - att.head_top_k
    return unused * 2 * d_model * head_expert_width(d_model, att)


def value_widths(d_model: int, att: AttentionSpec) -> tuple[int, int]:
    """(width of V, width of the output projection's input): kv_heads and heads times
    v_head_dim when the values are narrower than queries and keys (MiMo-V2-Flash), else
    attention_widths' K and Q widths."""
    q_width, kv_width = attention_widths(d_model, att)
    if att.v_head_dim is None or att.kv_lora_rank:
        return kv_width, q_width
    return (att.kv_heads or att.heads) * att.v_head_dim, att.heads * att.v_head_dim


def latent_attention_matrices(d_model: int, att: AttentionSpec) -> tuple[tuple[str, int, int,
                                                                                bool], ...]:
    """Multi-head latent attention (DeepSeek-V2/V3) as (name, n_in, n_out, bias) projections:
    queries straight from x or through a q_lora_rank bottleneck; one projection to the KV latent
    plus a shared rope key; the latent expanded to every head's key (nope part) and value."""
    h, qk, v = att.heads, att.head_dim or 0, att.v_head_dim or att.head_dim or 0
    nope, bias = qk - att.rope_head_dim, att.qkv_bias
    q: tuple[tuple[str, int, int, bool], ...]
    if att.query_gate:  # A.X-K2: from twice the query latent, queries and an output gate
        q = (("W_Q_a", d_model, att.q_lora_rank, bias),
             ("W_Q_b (and output gate)", 2 * att.q_lora_rank, h * (qk + v), False))
    elif att.q_lora_rank:
        q = (("W_Q_a", d_model, att.q_lora_rank, bias), ("W_Q_b", att.q_lora_rank, h * qk, False))
    else:
        q = (("W_Q", d_model, h * qk, False),)
    return q + (
        ("W_KV_a", d_model, att.kv_lora_rank + att.rope_head_dim, bias),
        ("W_KV_b", att.kv_lora_rank, h * (nope + v), False),
        ("W_O", h * v, d_model, att.out_bias),
    ) + (("W_gate (a scalar per head)", d_model, h, False),) * att.head_gate \
        + (("W_gate (output)", d_model, h * v, False),) * att.output_gate \
        + indexer_matrices(d_model, att)


def indexer_matrices(d_model: int, att: AttentionSpec) -> tuple[tuple[str, int, int, bool], ...]:
    """DeepSeek-V3.2's lightning indexer (DeepseekV32Indexer): wq_b from the query latent to
    index_heads x index_head_dim, wk from x to one key of index_head_dim, weights_proj from x
    to a weight per index head; none of them with a bias. Its key's LayerNorm is a norm."""
    if not att.index_heads:
        return ()
    ih, dim = att.index_heads, att.index_head_dim
    return (("indexer W_Q", att.q_lora_rank, ih * dim, False),
            ("indexer W_K", d_model, dim, False),
            ("indexer head weights", d_model, ih, False))


# DeepSeek-V4
def query_projections(d_model: int, att: AttentionSpec, q_out: int
                      ) -> tuple[tuple[str, int, int, bool], ...]:
    """W_Q as (name, n_in, n_out, bias): x -> q_out, or without a KV latent through
    q_lora_rank (DeepSeek-V4's q_a_proj, then q_b_proj; a bias on the first alone)."""
    bias = att.qkv_bias and att.query_bias
    if att.q_lora_rank and not att.kv_lora_rank:
        return (("W_Q_a", d_model, att.q_lora_rank, bias),
                ("W_Q_b", att.q_lora_rank, q_out, False))
    return (("W_Q", d_model, q_out, bias),)


def output_projections(d_model: int, att: AttentionSpec, o_width: int
                       ) -> tuple[tuple[str, int, int, bool], ...]:
    """W_O as (name, n_in, n_out, bias): o_width -> d_model, or DeepSeek-V4's grouped low-rank
    projection: o_groups blocks, each o_width / o_groups -> o_lora_rank (o_width x o_lora_rank
    in all), then o_groups x o_lora_rank -> d_model."""
    if att.o_groups:
        return (("W_O_a", o_width, att.o_lora_rank, False),
                ("W_O_b", att.o_groups * att.o_lora_rank, d_model, att.out_bias))
    return (("W_O", o_width, d_model, att.out_bias),)


def qk_norm_params(d_model: int, att: AttentionSpec) -> int:
    """Norms on queries and keys, and latent attention's norms on its two latents (and the
    indexer's LayerNorm, with bias, on its key; dots.llm3's on the rope key)."""
    if att.kv_lora_rank:
        rope_key = att.rope_head_dim if att.rope_key_norm else 0
        return att.kv_lora_rank + att.q_lora_rank + 2 * att.index_head_dim + rope_key
    query_latent = att.q_lora_rank  # without a KV latent: DeepSeek-V4's q_a_norm
    if att.qk_norm == "none":
        return query_latent
    head_dim = att.head_dim or d_model // att.heads
    widths = ((head_dim, head_dim) if att.qk_norm == "head"
              else (0, head_dim) if att.qk_norm == "key"  # DeepSeek-V4's kv_norm alone
              else attention_widths(d_model, att))
    return sum(widths) * (2 if att.qk_norm_bias else 1) + query_latent


def k_norm_params(d_model: int, att: AttentionSpec) -> int:
    """The key's part of qk_norm_params: a layer that reuses another's keys has no K norm."""
    if att.kv_lora_rank or att.qk_norm == "none":
        return 0
    head_dim = att.head_dim or d_model // att.heads
    width = head_dim if att.qk_norm in ("head", "key") else attention_widths(d_model, att)[1]
    return width * (2 if att.qk_norm_bias else 1)


def sink_params(att: AttentionSpec) -> int:
    """Attention sinks: one learned logit per head (gpt-oss)."""
    return att.heads if att.sinks else 0


def dynamic_mask_params(d_model: int, att: AttentionSpec) -> int:
    """Doge's dynamic mask: dt_proj from the values (kv_heads x head_dim) to one number per KV
    head (with attention's bias), and A, one per KV head."""
    if not att.dynamic_mask:
        return 0
    kv, kv_width = att.kv_heads or att.heads, attention_widths(d_model, att)[1]
    return linear(kv_width, kv, att.qkv_bias) + kv


def lambda_params(d_model: int, att: AttentionSpec) -> int:
    """Differential attention's lambda_q1, lambda_k1, lambda_q2, lambda_k2: head_dim each."""
    return 4 * (att.head_dim or d_model // att.heads) if att.differential else 0


def norm_params(d_model: int, norm: NormSpec) -> int:
    """A gain vector, plus a bias vector for LayerNorm with bias (RMSNorm has none); nothing
    for a norm without elementwise affine weights."""
    if not norm.affine:
        return 0
    return d_model * (2 if norm.bias and norm.kind == "layernorm" else 1)


def residual_scale_params(d_model: int, norm: NormSpec) -> int:
    """Doge's learned scales on the residual stream, one d_model vector before each of the
    layer's two residual additions (counted with the norms)."""
    return 2 * d_model if norm.residual_scales else 0


def residual_affine_params(d_model: int, norm: NormSpec) -> int:
    """ZAYA's affine residuals (ZayaResidualScaling after attention and after the FFN): each
    a scale and a bias of d_model on the branch and on the residual (counted with the norms)."""
    return 2 * 4 * d_model if norm.residual_affine else 0


def input_affine_params(d_model: int, norm: NormSpec) -> int:
    """ZAYA's scale and bias of d_model on the embeddings' output (input_hidden_states_scale,
    input_hidden_states_bias): with its affine residuals."""
    return 2 * d_model if norm.residual_affine else 0


def sub_norm_params(d_model: int, ffn: FfnSpec, norm: NormSpec) -> int:
    """BitNet's sub-norms: one on attention's output before W_O (d_model wide), one on the
    FFN's hidden layer (d_ff wide)."""
    return norm_params(d_model, norm) + norm_params(ffn.d_ff, norm) if norm.sub_norms else 0


def span_conv_matrices(d: int, att: AttentionSpec) -> tuple[tuple[str, str, int, int], ...]:
    """ConvBERT's span-based dynamic convolution as (name, shape, weights, biases): a separable
    convolution of the keys' input (depthwise d x kernel, pointwise d -> q, a bias), the
    per-head kernels from it (q -> heads x kernel), the convolved values (d -> q), and the
    half of W_O that reads the convolution's output (q x d; the other half is attention's)."""
    k = att.span_conv
    if not k:
        return ()
    q, _ = attention_widths(d, att)
    return (
        ("key convolution (separable)", f"{d} x {k} + {d} x {q}", d * k + d * q, q),
        ("convolution kernels", f"{q} x {att.heads * k}", q * att.heads * k, att.heads * k),
        ("convolution values", f"{d} x {q}", d * q, q),
        ("W_O (convolution half)", f"{q} x {d}", q * d, 0),
    )


def cross_attention(att: AttentionSpec) -> AttentionSpec:
    """A decoder layer's cross-attention: the self-attention's projections without the parts
    only self-attention has (global or entity projections, convolutions, relative terms)."""
    return replace(att, extra_projections=0, span_conv=0, xl_relative=False,
                   relative_projection=0, value_conv=0)


def attention_of(spec: ModelSpec, kind: LayerKind) -> AttentionSpec | None:
    """The softmax attention of a layer of this kind (None: another mixer, or none)."""
    if kind.mixer in ("linear", "mamba", "conv", "none"):
        return None
    return kind.attention or spec.attention


def contact_head_row(layers: int, heads: int) -> Row:
    """ESM's contact head: a logistic regression (with bias) on the attention maps of every
    layer's every head, one feature each."""
    return Row("contact head (with bias)", f"{layers * heads} x 1", linear(layers * heads, 1,
                                                                           True))
