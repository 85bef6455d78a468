"""The rows of a layer's breakdown (name, shape, parameters): its FFN, its attention and the
parts beside them (gates, relative terms, convolutions, Gemma 3n's extras, hyper-connections,
Zamba's shared block, MobileBERT's bottlenecks, Perceiver's latents)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ffncli.counting.parts import (
    Row,
    activation_params,
    adapter_params,
    attention_widths,
    channel_mix_params,
    down_bias,
    dynamic_mask_params,
    expert_params,
    grouped,
    head_expert_width,
    hidden_scale_params,
    lambda_params,
    latent_attention_matrices,
    linear,
    norm_params,
    output_projections,
    query_projections,
    router_params,
    sink_params,
    span_conv_matrices,
    value_widths,
)
from ffncli.specs.spec import AttentionSpec, FfnSpec, LayerKind, ModelSpec, NormSpec

if TYPE_CHECKING:  # a config reader builds them (specs/layers.py): off a preset's start-up
    from ffncli.specs.layers import BottleneckSpec, LatentSpec, LayerExtrasSpec, SharedBlockSpec


def attention_params(d_model: int, att: AttentionSpec) -> int:
    """W_Q, W_K, W_V, W_O (K and V are kv_heads * head_dim wide under grouped queries)."""
    if att.kv_lora_rank:
        return sum(linear(n_in, n_out, bias)
                   for _, n_in, n_out, bias in latent_attention_matrices(d_model, att)) \
            + sink_params(att)
    return sum(r.params for r in attention_block_rows(d_model, att, ""))


def gate_rows(d_model: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """An output gate of one scalar per head, d_model -> heads (Laguna), and a bias per head
    on the output gate (Beam)."""
    h = att.heads
    head = (Row(f"{prefix}output gate (per head)", f"{d_model} x {h}", d_model * h),) \
        if att.head_gate else ()
    return head + ((Row(f"{prefix}output gate bias", f"{h}", h),) if att.gate_bias else ())


def ffn_block_rows(d: int, ffn: FfnSpec) -> tuple[Row, ...]:
    f = ffn.d_ff
    biases = ffn.bias
    w, g = d * f // ffn.groups, f" in {ffn.groups} groups" if ffn.groups > 1 else ""
    if ffn.gated:
        rows = [Row("W (gate, activated)", f"{d} x {f}{g}", w)]
        rows += [Row("b", f"{f}", f)] if biases else []
        rows += [Row("V (up, linear)", f"{d} x {f}{g}", w)]
        rows += [Row("c", f"{f}", f)] if biases else []
    else:
        rows = [Row("W1", f"{d} x {f}{g}", w)] + ([Row("b1", f"{f}", f)] if biases else [])
    rows += [Row("W2", f"{f} x {d}{g}", w)] + ([Row("b2", f"{d}", d)] if down_bias(ffn) else [])
    if ffn.channel_mix:  # RWKV
        rows += [Row("R (receptance) and token-shift mixing", f"{d} x {d} + 2 x {d}",
                     channel_mix_params(d, ffn))]
    if activation_params(ffn):
        rows += [Row(f"{ffn.activation} scalars", f"{activation_params(ffn)}",
                     activation_params(ffn))]
    if ffn.hidden_scales:  # Dory's suv_gate and suv_up
        rows += [Row("hidden scales", f"{ffn.hidden_scales} x {f}", hidden_scale_params(ffn))]
    if ffn.is_moe:
        rows = _experts_rows(d, ffn, rows)
    if ffn.stack > 1:
        rows.append(Row(f"x {ffn.stack} FFNs in sequence", f"{ffn.stack} x "
                        f"{expert_params(d, ffn):,}", ffn.stack * expert_params(d, ffn)))
    if ffn.output_bias:  # JetMoE: on the experts' summed output
        rows.append(Row("output bias", f"{d}", d))
    if ffn.adapters:
        a = ffn.adapter_d_ff
        rows.append(Row(f"x {ffn.adapters} language adapters", f"{d} x {a} x {d}",
                        adapter_params(d, ffn)))
    return tuple(rows)


def _experts_rows(d: int, ffn: FfnSpec, rows: list[Row]) -> list[Row]:
    """A mixture of experts' rows: one expert's (rows), all experts, the router, a shared
    expert and its gate."""
    per_expert = expert_params(d, ffn)
    rows = [Row(f"expert: {r.name}", r.shape, r.params) for r in rows]
    rows.append(Row(f"x {ffn.experts} experts", f"{ffn.experts} x {per_expert:,}",
                    ffn.experts * per_expert))
    over = f" + {d} x {ffn.shared_d_ff // ffn.d_ff} + 1" if ffn.router_shared else ""
    over += f" + {d} + {ffn.experts}" if ffn.router_scales else ""  # Gemma 4's scales
    shape = f"{d} x {ffn.experts + ffn.zero_experts}{over}"
    if ffn.router_mlp:  # ZAYA's MLP (its norm with the norms), and the previous state's scale
        r = ffn.router_mlp
        shape = f"{d} x {r} x {r} x {r} x {ffn.experts + ffn.zero_experts}" \
            + (f" + {r}" if ffn.router_states else "")
    rows.append(Row("router", shape, router_params(d, ffn)))
    if ffn.shared_d_ff:
        shared = expert_params(d, FfnSpec(d_ff=ffn.shared_d_ff, gated=ffn.gated,
                                          bias=ffn.bias))
        rows.append(Row("shared expert (every token)", f"d_ff {ffn.shared_d_ff}", shared))
    if ffn.shared_gate:
        rows.append(Row("shared expert gate", f"{d} x 1", d))
    return rows


def attention_block_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    if att.head_experts:
        return head_expert_rows(d, att, prefix)
    sinks = (Row(f"{prefix}sinks", f"{att.heads}", sink_params(att)),) if att.sinks else ()
    if att.kv_lora_rank:  # its head gate one of its matrices
        return tuple(Row(f"{prefix}{name}", f"{n_in} x {n_out}", linear(n_in, n_out, bias))
                     for name, n_in, n_out, bias in latent_attention_matrices(d, att)) + sinks
    extra = extra_projection_rows(d, att, prefix) + span_conv_rows(d, att, prefix) \
        + xl_relative_rows(d, att, prefix) + relative_projection_rows(d, att, prefix) \
        + value_conv_rows(att, prefix)
    mine = dynamic_mask_rows(d, att, prefix) + lambda_rows(d, att, prefix)
    if att.learned_scalars:  # NeoMME's alpha per head and residual lambdas
        mine += (Row(f"{prefix}learned scalars", f"{att.learned_scalars}", att.learned_scalars),)
    mine += qsa_indexer_rows(d, att, prefix)
    return extra + projection_rows(d, att, prefix) + sinks + gate_rows(d, att, prefix) + mine


def projection_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """W_Q (with the output gate, as wide again), W_K, W_V and W_O, less the ones a layer
    shares (Reformer's W_K, Gemma 4's W_V)."""
    q_width, kv_width = attention_widths(d, att)
    v_width, o_width = value_widths(d, att)
    q_out = q_width * (2 if att.output_gate else 1)  # the output gate: as wide again
    qkv = att.qkv_groups
    core: tuple[Row, ...] = (
        Row(f"{prefix}W_Q" + (" (and output gate)" if att.output_gate else ""),
            f"{d} x {q_out}", grouped(d, q_out, att.qkv_bias and att.query_bias, qkv)),
        Row(f"{prefix}W_K", f"{d} x {kv_width}", grouped(d, kv_width,
                                                         att.qkv_bias and att.key_bias, qkv)),
        Row(f"{prefix}W_V", f"{d} x {v_width}", grouped(d, v_width, att.qkv_bias, qkv)),
        Row(f"{prefix}W_O", f"{o_width} x {d}", grouped(o_width, d, att.out_bias,
                                                        att.out_groups)),
    )
    if att.q_lora_rank or att.o_groups:  # DeepSeek-V4: W_Q and W_O each through a rank
        q_rows, o_rows = factored_rows(d, att, prefix, q_out, o_width)
        core = q_rows + core[1:3] + o_rows
    if att.shared_qk:  # Reformer's LSH attention: W_Q is the keys' projection too
        core = tuple(r for r in core if r.name != f"{prefix}W_K")
    if att.values_are_keys:  # Gemma 4's full layers: W_K's keys are the values too
        core = tuple(r for r in core if r.name != f"{prefix}W_V")
    return core


# DeepSeek-V4
def factored_rows(d: int, att: AttentionSpec, prefix: str, q_out: int, o_width: int
                  ) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """(W_Q's rows, W_O's rows): DeepSeek-V4's W_Q through q_lora_rank and its grouped
    low-rank W_O (o_groups blocks of o_width / o_groups -> o_lora_rank, then d_model)."""
    g = max(att.o_groups, 1)
    shapes = {"W_O_a": f"{g} x {o_width // g} x {att.o_lora_rank}"}

    def rows(matrices: tuple[tuple[str, int, int, bool], ...]) -> tuple[Row, ...]:
        return tuple(Row(f"{prefix}{name}", shapes.get(name, f"{n_in} x {n_out}"),
                         linear(n_in, n_out, bias)) for name, n_in, n_out, bias in matrices)
    return rows(query_projections(d, att, q_out)), rows(output_projections(d, att, o_width))


def head_expert_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """A mixture of attention heads (JetMoE's MoA): W_Q and W_O in head_experts banks, K and V
    shared (one projection), the banks' router and the bias on their summed output; no other
    bias."""
    e, w, kv = att.head_experts, head_expert_width(d, att), attention_widths(d, att)[1]
    return (Row(f"{prefix}W_Q ({e} experts)", f"{e} x {d} x {w}", e * d * w),
            Row(f"{prefix}W_K and W_V (shared)", f"{d} x {2 * kv}", 2 * d * kv),
            Row(f"{prefix}W_O ({e} experts)", f"{e} x {w} x {d}", e * w * d),
            Row(f"{prefix}router (top-{att.head_top_k})", f"{d} x {e}", d * e),
            Row(f"{prefix}output bias", f"{d}", d))


def dynamic_mask_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    kv = att.kv_heads or att.heads
    return (Row(f"{prefix}dt_proj and A (dynamic mask)",
                f"{attention_widths(d, att)[1]} x {kv} + {kv}", dynamic_mask_params(d, att)),) \
        if att.dynamic_mask else ()


def lambda_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    return (Row(f"{prefix}lambdas (q1, k1, q2, k2)", f"4 x {lambda_params(d, att) // 4}",
                lambda_params(d, att)),) if att.differential else ()


def extra_projection_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """More projections of Q's shape in each layer: Longformer's global Q, K and V, LUKE's
    entity-aware queries (each d x heads * head_dim, with Q's bias)."""
    n = att.extra_projections
    if not n:
        return ()
    q_width, _ = attention_widths(d, att)
    return (Row(f"{prefix}{n} more projections (global or entity)", f"{n} x {d} x {q_width}",
                n * linear(d, q_width, att.qkv_bias)),)


def xl_relative_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """Transformer-XL's relative attention: the kernel projecting relative positions
    (d x heads x head_dim), the content, position and segment biases (heads x head_dim each)
    and the two segments' embeddings (2 x heads x head_dim)."""
    if not att.xl_relative:
        return ()
    q, _ = attention_widths(d, att)
    return (Row(f"{prefix}position kernel", f"{d} x {q}", d * q),
            Row(f"{prefix}r_w, r_r, r_s biases and segments", f"5 x {q}", 5 * q))


def relative_projection_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """ProphetNet's decoder: relative-position logits projected from each token (d ->
    buckets x heads, with a bias)."""
    n = att.relative_projection
    return (Row(f"{prefix}relative position projection", f"{d} x {n}", linear(d, n, True)),) \
        if n else ()


def value_conv_rows(att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """Nystromformer: a depthwise convolution (kernel x 1, no bias) over each head's values,
    added to the attention's output: one kernel per head."""
    k = att.value_conv
    return (Row(f"{prefix}value convolution", f"{att.heads} x {k}", att.heads * k),) if k \
        else ()


def span_conv_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    return tuple(Row(f"{prefix}{name}", shape, weights + biases)
                 for name, shape, weights, biases in span_conv_matrices(d, att))


def layer_extra_rows(d: int, x: LayerExtrasSpec) -> tuple[Row, ...]:
    """Gemma 3n's parts of each layer: AltUp (correction n x n and prediction n x n^2
    coefficients, a d -> n router and its norm, a per-channel output scale), LAuReL (d -> rank
    -> d and a norm), the per-layer input (gate d -> w, projection w -> d, a norm). Gemma 4 has
    the per-layer input alone (no AltUp inputs, no LAuReL rank)."""
    n, r, w = x.altup_inputs, x.laurel_rank, x.per_layer_width
    altup = (Row("AltUp", f"{n}x{n} + {n}x{n * n} + {d}x{n} + 2 x {d}",
                 n * n + n ** 3 + d * n + 2 * d),) if n else ()
    laurel = (Row("LAuReL", f"{d} x {r} x {d} + {d}", 2 * d * r + d),) if r else ()
    return altup + laurel + (Row("per-layer input", f"{d} x {w} x {d} + {d}", 2 * d * w + d),)


def norm_gate_rows(d: int, kind: LayerKind) -> tuple[Row, ...]:
    """A.X-K2's gated norms: each gates its output by sigmoid(fc2(silu(fc1(y)))), fc1 d x rank
    and fc2 rank x d without biases (the norms' own weights are counted with the norms)."""
    n, r = kind.gated_norms, kind.norm_gate_rank
    if not n:
        return ()
    return (Row("norm gates", f"{n} x ({d} x {r} + {r} x {d})", n * 2 * d * r),)


def hyper_rows(d: int, n: int) -> tuple[Row, ...]:
    """Hyper-connections (HY-V4, after DeepSeek-V4) around attention and around the FFN of
    each layer, over n copies of the stream: each fn (2n x n d), base (2n) and scale (2)."""
    if not n:
        return ()
    one = 2 * n * n * d + 2 * n + 2
    return (Row("hyper-connections", f"2 x ({2 * n} x {n * d} + {2 * n} + 2)", 2 * one),)


# DeepSeek-V4
def mixing_hyper_rows(d: int, n: int) -> tuple[Row, ...]:
    """DeepSeek-V4's manifold-constrained hyper-connections (mHC) around attention and around
    the FFN of each layer, over n copies of the stream: each projects the n streams to the
    weights that collapse them (n), expand the output (n) and mix them (n x n): fn
    ((2 + n) n x n d), base ((2 + n) n) and a scale for each of the three (3)."""
    w = (2 + n) * n
    one = w * n * d + w + 3
    return (Row("hyper-connections", f"2 x ({w} x {n * d} + {w} + 3)", 2 * one),)


def qsa_indexer_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """Qwen4-Exp's QSA indexer (Qwen4ExpTextQSAIndexer): index_qk_proj from x to qsa_heads
    queries and one key of qsa_head_dim, no bias; q_layernorm and k_layernorm, an RMSNorm of
    qsa_head_dim each."""
    h, dim = att.qsa_heads, att.qsa_head_dim
    if not h:
        return ()
    return (Row(f"{prefix}QSA indexer W_Q and W_K", f"{d} x {(h + 1) * dim}", d * (h + 1) * dim),
            Row(f"{prefix}QSA indexer norms (Q, K)", f"2 x {dim}", 2 * dim))


def gated_residual_rows(d: int, n: int, rank: int) -> tuple[Row, ...]:
    """Qwen4-Exp's gated residuals (Qwen4ExpTextGatedResidual) around attention and around the
    FFN of each layer, over n copies of the stream: each an RMSNorm of n d, input_mix_weight_down
    (n d -> rank) and up (rank -> n d) and block_inject_weight (n d -> n), no biases."""
    per = 1 + 2 * rank + n  # the norm, down and up, the inject weight: n d x this
    return (Row("gated residuals", f"2 x {n * d} x {per}", 2 * n * d * per),)


def gated_residual_head_rows(d: int, n: int, rank: int) -> tuple[Row, ...]:
    """Qwen4-Exp's hyper_connection_mixer, merging the n streams after the last layer: a gated
    residual without block_inject_weight (and no final norm beside it)."""
    return (Row("gated residual head", f"{n * d} x {1 + 2 * rank}", n * d * (1 + 2 * rank)),)


def hyper_head_rows(d: int, n: int) -> tuple[Row, ...]:
    """The hyper-connection head that merges the n streams before the final norm: hc_fn
    (n x n d), hc_base (n) and hc_scale (1)."""
    if not n:
        return ()
    return (Row("hyper-connection head", f"{n} x {n * d} + {n} + 1", n * n * d + n + 1),)


def shared_block_rows(d: int, att: AttentionSpec, ffn: FfnSpec, blk: SharedBlockSpec
                      ) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """(attention rows, FFN rows) of Zamba's shared block, without biases: Q, K and V from
    input_width channels, O back to d; Zamba2's LoRA adapters, one pair a layer using the
    block, on Q, K and V (input_width -> rank -> input_width each) and on the FFN's gate and up
    (d -> rank -> 2 d_ff)."""
    w, r, users = blk.input_width, blk.adapter_rank, blk.users
    q, kv = attention_widths(d, att)
    attention: tuple[Row, ...] = (
        Row("shared W_Q", f"{w} x {q}", w * q), Row("shared W_K", f"{w} x {kv}", w * kv),
        Row("shared W_V", f"{w} x {kv}", w * kv), Row("shared W_O", f"{q} x {d}", q * d))
    if blk.attention_adapters:
        attention += (Row("shared Q, K, V adapters", f"{users} x 3 x ({w} x {r} x {w})",
                          users * 3 * 2 * w * r),)
    up = 2 * ffn.d_ff if ffn.gated else ffn.d_ff
    adapters = (Row("adapters on gate and up", f"{users} x ({d} x {r} x {up})",
                    users * (d * r + r * up)),) if r else ()
    return attention, ffn_block_rows(d, ffn) + adapters


def latent_rows(d: int, lat: LatentSpec) -> dict[str, tuple[Row, ...]]:
    """Perceiver's latent array and its cross-attention to the inputs, by group: the latents
    (embeddings); Q from the latents, K and V from the inputs, the output to d_model, biases
    on all (attention); the MLP d -> widening x d -> d with biases (ffn); LayerNorms on the
    latents, on the inputs and before the MLP (norms)."""
    n, w = lat.inputs, lat.widening * d
    return {
        "embeddings": (Row("latents", f"{lat.latents} x {d}", lat.latents * d),),
        "attention": (
            Row("cross-attention W_Q", f"{d} x {lat.qk}", linear(d, lat.qk, True)),
            Row("cross-attention W_K", f"{n} x {lat.qk}", linear(n, lat.qk, True)),
            Row("cross-attention W_V", f"{n} x {lat.v}", linear(n, lat.v, True)),
            Row("cross-attention W_O", f"{lat.v} x {d}", linear(lat.v, d, True))),
        "ffn": (Row("cross-attention MLP", f"{d} x {w} x {d}",
                    linear(d, w, True) + linear(w, d, True)),),
        "norms": (Row("cross-attention norms", f"{d}, {n}, {d}", 2 * (2 * d + n)),),
    }


def bottleneck_layer_rows(d: int, b: BottleneckSpec, norm: NormSpec,
                          att: AttentionSpec | None) -> tuple[Row, ...]:
    """MobileBERT's parts of each layer beside attention and FFNs: the projection in (outer ->
    d, bias, norm), the queries' and keys' own (with shared_qk), the values' wider input (V
    reads the outer stream: (outer - d) more rows), the projection out (d -> outer, bias,
    norm)."""
    o = b.outer
    into = linear(o, d, True) + norm_params(d, norm)
    rows = [Row("bottleneck in (and norm)", f"{o} x {d}", into)]
    if b.shared_qk:
        rows.append(Row("query-key bottleneck (and norm)", f"{o} x {d}", into))
    if b.value_outer and att is not None:
        v = attention_widths(d, att)[1]
        rows.append(Row("W_V's outer input", f"{o - d} x {v}", (o - d) * v))
    rows.append(Row("bottleneck out (and norm)", f"{d} x {o}",
                    linear(d, o, True) + norm_params(o, norm)))
    return tuple(rows)


def head_scale_row(vocab: int) -> Row:
    """A learned scale per vocabulary entry on the logits (Dory's logit_scale)."""
    return Row("logit scale", f"{vocab}", vocab)


def stream_rows(d: int, spec: ModelSpec) -> tuple[Row, ...]:
    """The rows around each layer's two blocks over spec.hyper_streams copies of the stream:
    DeepSeek-V4's mixing hyper-connections, Qwen4-Exp's gated residuals, else HY-V4's
    hyper-connections (none with no streams)."""
    if spec.hyper_mixing:
        return mixing_hyper_rows(d, spec.hyper_streams)
    if spec.hyper_rank:
        return gated_residual_rows(d, spec.hyper_streams, spec.hyper_rank)
    return hyper_rows(d, spec.hyper_streams)


def stream_head_rows(d: int, spec: ModelSpec) -> tuple[Row, ...]:
    """The parts that merge the streams after the last layer (Qwen4-Exp's gated residual head,
    else HY-V4's and DeepSeek-V4's hyper-connection head), and Inkling 2's learned queries of
    d_model outside the layers (its last attention residual and its loop's message queries,
    four a looped layer)."""
    n, rank = spec.hyper_streams, spec.hyper_rank
    head = gated_residual_head_rows(d, n, rank) if rank else hyper_head_rows(d, n)
    q = spec.residual_queries
    return head + ((Row("block attention residual queries (outside the layers)", f"{q} x {d}",
                        q * d),) if q else ())
