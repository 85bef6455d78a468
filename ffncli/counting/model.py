"""Parameters, FLOPs and weight memory of a spec: pure integer arithmetic, one function a formula.

Counting follows the reference implementations (Hugging Face classes, the 2017 paper): tied
weights are counted once, buffers never. FLOPs are 2 per multiply-add of the matrix products
(biases, activations, norms and softmax are left out, as in Kaplan et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    ModelSpec,
    NormSpec,
)

if TYPE_CHECKING:  # a config reader builds them (specs/layers.py): off a preset's start-up
    from ffncli.specs.layers import (
        BottleneckSpec,
        LatentSpec,
        LayerExtrasSpec,
        LinearMixerSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        SharedBlockSpec,
        ShortConvSpec,
        SideConvSpec,
    )

BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "int8": 1}
BITS_PER_PARAM = {"float32": 32, "bfloat16": 16, "int8": 8, "int4": 4}
# A KV cache element: 16-bit floats, or one byte for fp8 (e4m3/e5m2) and int8 caches.
KV_BYTES = {"float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
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
        + activation_params(ffn)


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
    return linear(d_model, ffn.experts + ffn.zero_experts, ffn.router_bias) \
        + shared_router_params(d_model, ffn) + router_scale_params(d_model, ffn) \
        if ffn.is_moe else 0


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


def ffn_params(d_model: int, ffn: FfnSpec) -> int:
    return ffn.stack * (ffn.experts * expert_params(d_model, ffn) + router_params(d_model, ffn)
                        + shared_expert_params(d_model, ffn)) + adapter_params(d_model, ffn)


def ffn_active_params(d_model: int, ffn: FfnSpec) -> int:
    """What one token uses: its top-k experts, the router and any shared expert (and every
    language adapter: the input, not a router, picks one, as transformers counts them)."""
    return ffn.stack * (ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)
                        + shared_expert_params(d_model, ffn)) + adapter_params(d_model, ffn)


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


def qk_norm_params(d_model: int, att: AttentionSpec) -> int:
    """Norms on queries and keys, and latent attention's norms on its two latents (and the
    indexer's LayerNorm, with bias, on its key; dots.llm3's on the rope key)."""
    if att.kv_lora_rank:
        rope_key = att.rope_head_dim if att.rope_key_norm else 0
        return att.kv_lora_rank + att.q_lora_rank + 2 * att.index_head_dim + rope_key
    if att.qk_norm == "none":
        return 0
    head_dim = att.head_dim or d_model // att.heads
    widths = ((head_dim, head_dim) if att.qk_norm == "head"
              else attention_widths(d_model, att))
    return sum(widths) * (2 if att.qk_norm_bias else 1)


def k_norm_params(d_model: int, att: AttentionSpec) -> int:
    """The key's part of qk_norm_params: a layer that reuses another's keys has no K norm."""
    if att.kv_lora_rank or att.qk_norm == "none":
        return 0
    head_dim = att.head_dim or d_model // att.heads
    width = head_dim if att.qk_norm == "head" else attention_widths(d_model, att)[1]
    return width * (2 if att.qk_norm_bias else 1)


def attention_params(d_model: int, att: AttentionSpec) -> int:
    """W_Q, W_K, W_V, W_O (K and V are kv_heads * head_dim wide under grouped queries)."""
    if att.kv_lora_rank:
        return sum(linear(n_in, n_out, bias)
                   for _, n_in, n_out, bias in latent_attention_matrices(d_model, att)) \
            + sink_params(att)
    return sum(r.params for r in _attention_rows(d_model, att, ""))


def gate_rows(d_model: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    """An output gate of one scalar per head, d_model -> heads (Laguna), and a bias per head
    on the output gate (Beam)."""
    h = att.heads
    head = (Row(f"{prefix}output gate (per head)", f"{d_model} x {h}", d_model * h),) \
        if att.head_gate else ()
    return head + ((Row(f"{prefix}output gate bias", f"{h}", h),) if att.gate_bias else ())


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


def linear_mixer_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int],
                                                                         ...]:
    """Gated DeltaNet (Qwen3-Next) as (name, shape, params): one projection to Q, K, V and the
    output gate z, one to the per-head beta and alpha, a depthwise convolution over Q, K and
    V, the per-head decay (A_log) and time-step bias, a gated RMSNorm of a value head, and
    the output projection."""
    k, v = mix.k_heads * mix.k_head_dim, mix.v_heads * mix.v_head_dim
    conv = 2 * k + v
    return (
        ("W_qkvz", f"{d_model} x {2 * k + 2 * v}", d_model * (2 * k + 2 * v)),
        ("W_ba", f"{d_model} x {2 * mix.v_heads}", d_model * 2 * mix.v_heads),
        ("conv1d (depthwise)", f"{conv} x {mix.conv_kernel}", conv * mix.conv_kernel),
        ("A_log, dt_bias", f"2 x {mix.v_heads}", 2 * mix.v_heads),
        ("output norm", f"{mix.v_head_dim}", mix.v_head_dim),
        ("W_O", f"{v} x {d_model}", v * d_model),
    )


def side_conv_matrices(d_model: int, mix: SideConvSpec) -> tuple[tuple[str, str, int], ...]:
    """Inkling's parts beside attention as (name, shape, params): the short convolutions on K
    and V and on the stream, the relative-position logits' projection and table."""
    k, r = mix.kernel, mix.rel_dim
    return (
        ("K, V short convolutions", f"2 x {mix.kv_width} x {k}", 2 * mix.kv_width * k),
        ("stream short convolutions", f"2 x {mix.width} x {k}", 2 * mix.width * k),
        ("relative logits", f"{d_model} x {mix.heads * r} + {r} x {mix.rel_extent}",
         d_model * mix.heads * r + r * mix.rel_extent),
    )


def short_conv_matrices(d_model: int, mix: ShortConvSpec) -> tuple[tuple[str, str, int], ...]:
    """LFM's short convolution as (name, shape, params): in_proj to B, C and x, the depthwise
    convolution, out_proj; biases on all three with ``bias``."""
    w, b = mix.width, mix.bias
    return (
        ("in_proj (B, C, x)", f"{d_model} x {3 * w}", linear(d_model, 3 * w, b)),
        ("conv1d (depthwise)", f"{w} x {mix.kernel}", w * mix.kernel + (w if b else 0)),
        ("out_proj", f"{w} x {d_model}", linear(w, d_model, b)),
    )


def rg_lru_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """RecurrentGemma's recurrent block (LinearMixerSpec kind "rg_lru", width k_heads x
    k_head_dim) as (name, shape, params), biases on every projection: the gate branch y and
    the input branch x (d_model -> width each), a depthwise convolution over x, the RG-LRU's
    recurrence parameter (one a channel) and its input and recurrence gates (block-diagonal,
    one k_head_dim square a head, with biases), the output projection."""
    h, b = mix.k_heads, mix.k_head_dim
    w = h * b
    return (
        ("linear_y, linear_x", f"2 x {d_model} x {w}", 2 * linear(d_model, w, True)),
        ("conv1d (depthwise)", f"{w} x {mix.conv_kernel}", w * mix.conv_kernel + w),
        ("RG-LRU gates and recurrence", f"2 x {h} x ({b} x {b} + {b}), {w}",
         2 * h * (b * b + b) + w),
        ("linear_out", f"{w} x {d_model}", linear(w, d_model, True)),
    )


def rwkv_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """RWKV's time mixing (LinearMixerSpec kind "rwkv", k_head_dim its width a) as (name,
    shape, params): key, value and receptance (d -> a), the output (a -> d), the per-channel
    decay and first-token bonus (a each), three token-shift mixing vectors (d each)."""
    a = mix.k_head_dim
    return (
        ("key, value, receptance", f"3 x {d_model} x {a}", 3 * d_model * a),
        ("output", f"{a} x {d_model}", a * d_model),
        ("time decay, time first", f"2 x {a}", 2 * a),
        ("token-shift mixing", f"3 x {d_model}", 3 * d_model),
    )


def mlstm_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """xLSTM's mLSTM layer (LinearMixerSpec kind "mlstm") as (name, shape, params), without
    biases but on its gates: Q and K (k_heads x k_head_dim), V and the output gate (v_heads x
    v_head_dim), the input and forget gates (one a head, with biases), the per-head norm of
    the values, the output projection."""
    qk, v, h = mix.k_heads * mix.k_head_dim, mix.v_heads * mix.v_head_dim, mix.k_heads
    return (
        ("W_q, W_k", f"2 x {d_model} x {qk}", 2 * d_model * qk),
        ("W_v, output gate", f"2 x {d_model} x {v}", 2 * d_model * v),
        ("input and forget gates", f"2 x ({d_model} x {h} + {h})", 2 * linear(d_model, h, True)),
        ("multi-head norm", f"{v}", v),
        ("out_proj", f"{v} x {d_model}", v * d_model),
    )


def kda_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """Kimi Delta Attention (Kimi Linear, LinearMixerSpec kind "kda") as (name, shape, params):
    Q, K and V of heads x head_dim each, a depthwise convolution over them (no bias), the
    per-channel forget gate through a head_dim bottleneck with its dt_bias (one a channel) and
    A_log (one a head), beta (one a head), the output gate through the same bottleneck, the
    gated RMSNorm of a head, the output projection."""
    h, r = mix.k_heads, mix.k_head_dim
    w = h * r
    # kind "kda_full" (Bailing's hybrid): both gates one d_model x width projection
    gate, shape = (d_model * w, f"{d_model} x {w}") if mix.kind == "kda_full" else (
        d_model * r + r * w, f"{d_model} x {r} x {w}")
    return (
        ("W_q, W_k, W_v", f"3 x {d_model} x {w}", 3 * d_model * w),
        ("conv1d (depthwise)", f"{3 * w} x {mix.conv_kernel}", 3 * w * mix.conv_kernel),
        ("forget gate", f"{shape}, dt_bias {w}, A_log {h}", gate + w + h),
        ("W_beta", f"{d_model} x {h}", d_model * h),
        ("output gate", shape, gate),
        ("output norm", f"{r}", r),
        ("W_O", f"{w} x {d_model}", w * d_model),
    )


def lightning_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """Lightning attention (MiniMax-Text-01, LinearMixerSpec kind "lightning") as (name, shape,
    params): one projection to Q, K and V of v_heads x v_head_dim each, a sigmoid output gate
    as wide, an RMSNorm over all heads' outputs, the output projection; no convolution."""
    w = mix.v_heads * mix.v_head_dim
    return (
        ("W_qkv", f"{d_model} x {3 * w}", d_model * 3 * w),
        ("output gate", f"{d_model} x {w}", d_model * w),
        ("output norm", f"{w}", w),
        ("W_O", f"{w} x {d_model}", w * d_model),
    )


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


def sub_norm_params(d_model: int, ffn: FfnSpec, norm: NormSpec) -> int:
    """BitNet's sub-norms: one on attention's output before W_O (d_model wide), one on the
    FFN's hidden layer (d_ff wide)."""
    return norm_params(d_model, norm) + norm_params(ffn.d_ff, norm) if norm.sub_norms else 0


# ---------------------------------------------------------------------------------------------
# KV cache: what decoding keeps per token.


@dataclass(frozen=True)
class KvPart:
    """The cache of the decoder layers of one kind, as transformers' cache holds it: each layer
    keeps ``per_token`` values for each of the last ``cap`` tokens (every token when cap is 0),
    plus ``state`` values per sequence whatever its length (a linear-attention or SSM state)."""

    kind: str  # full, sliding, chunked, mla (latent), linear, mamba, shared (none of its own)
    layers: int
    per_token: int
    cap: int = 0
    state: int = 0
    # which cache layers (0-based; empty for every layer): the decoder layers, or each attention
    # sublayer where a layer has several (LongCat-Flash: layer i's are 2i and 2i + 1)
    indices: tuple[int, ...] = ()

    def elements(self, seq_len: int) -> int:
        """Values held for one sequence of seq_len tokens, all layers of this kind."""
        tokens = min(seq_len, self.cap) if self.cap else seq_len
        return self.layers * (self.per_token * tokens + self.state)


@dataclass(frozen=True)
class KvCache:
    kind: str  # "mha", "gqa", "mqa", "mla" (latent), "state" (no attention), "none"
    layers: int  # decoder layers holding a cache (cross-attention counted as more layers)
    elements_per_token: int  # cached numbers per token, all layers, below every window
    seq_len: int
    batch: int
    parts: tuple[KvPart, ...] = ()  # per layer kind

    def elements(self, seq_len: int) -> int:
        """Values held for one sequence of seq_len tokens, all layers."""
        return sum(p.elements(seq_len) for p in self.parts)

    @property
    def grows(self) -> bool:
        """Whether the cache still grows at seq_len (not every layer capped or a state)."""
        return self.elements(self.seq_len + 1) > self.elements(self.seq_len)

    def bytes_per_token(self) -> dict[str, int]:
        return {dtype: self.elements_per_token * size for dtype, size in KV_BYTES.items()}

    def bytes(self) -> dict[str, int]:
        """At seq_len tokens for each of batch sequences."""
        n = self.elements(self.seq_len) * self.batch
        return {dtype: n * size for dtype, size in KV_BYTES.items()}


def kv_elements_per_layer(d_model: int, att: AttentionSpec) -> int:
    """One token's cache in one layer: K and V of each kv head, or under latent attention the
    compressed latent and the shared rope key (what transformers 5 caches for DeepSeek-V3), and
    the indexer's key (DeepSeek-V3.2's DynamicIndexedLayer)."""
    if att.kv_lora_rank:
        return att.kv_lora_rank + att.rope_head_dim + att.index_head_dim
    _, kv_width = attention_widths(d_model, att)
    return kv_width + value_widths(d_model, att)[0]


def linear_state_elements(mix: LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec
                          | ShortConvSpec | SideConvSpec) -> int:
    """A fixed state: Gated DeltaNet's convolution's last conv_kernel inputs (Q, K and V) and
    one k_head_dim x v_head_dim matrix per value head; Mamba's convolution inputs and its
    d_inner x d_state SSM state; a short convolution's last kernel inputs."""
    from ffncli.specs.layers import (  # loaded: mix is one
        LinearMixerSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        ShortConvSpec,
        SideConvSpec,
    )

    if isinstance(mix, ShortConvSpec):
        return mix.width * mix.kernel
    if isinstance(mix, SideConvSpec):  # Inkling: K, V and the stream's two convolutions
        return 2 * (mix.kv_width + mix.width) * mix.kernel
    if isinstance(mix, LinearMixerSpec) and mix.kind == "rwkv":  # five vectors of d_model
        return 5 * mix.v_head_dim  # (v_head_dim): the shifts, numerator, denominator, maximum
    if isinstance(mix, LinearMixerSpec) and mix.kind == "mlstm":  # C, n and m of each head
        return mix.k_heads * (mix.k_head_dim * mix.v_head_dim + mix.k_head_dim + 1)
    if isinstance(mix, LinearMixerSpec) and mix.kind == "rg_lru":  # the last conv_kernel - 1
        return mix.k_heads * mix.k_head_dim * mix.conv_kernel  # inputs and the recurrence
    if isinstance(mix, MambaMixerSpec):
        return mix.d_inner * (mix.conv_kernel + mix.d_state)
    if isinstance(mix, Mamba2MixerSpec):  # the convolved stream's inputs, a state per head
        conv = mix.d_inner + 2 * mix.groups * mix.d_state
        return conv * mix.conv_kernel + mix.d_inner * mix.d_state
    if mix.kind == "lightning":  # one k_head_dim x v_head_dim state per head, no convolution
        return mix.v_heads * mix.k_head_dim * mix.v_head_dim
    conv = 2 * mix.k_heads * mix.k_head_dim + mix.v_heads * mix.v_head_dim
    return conv * mix.conv_kernel + mix.v_heads * mix.k_head_dim * mix.v_head_dim


def _beside_attention_state(kind: LayerKind) -> int:
    """The fixed state of a mixer that runs beside a layer's attention (Falcon-H1's Mamba-2,
    a mixer_spec on an attention layer): kept with that layer's K and V."""
    return linear_state_elements(kind.mixer_spec) if kind.mixer_spec is not None else 0


def _kv_part(spec: ModelSpec, kind: LayerKind, indices: tuple[int, ...]) -> KvPart | None:
    """A kind of layer's cache: sliding and chunked layers keep the last window - 1 tokens
    (transformers' DynamicSlidingWindowLayer), a layer reading another's KV keeps none."""
    n = len(indices)
    if kind.shares_kv:
        return KvPart("shared", n, 0, indices=indices)
    if kind.mixer in ("linear", "mamba", "conv") and kind.mixer_spec is not None:
        shared = kind.attention if kind.shared is not None else None  # Zamba's shared block
        return KvPart(kind.mixer, n, kv_elements_per_layer(spec.d_model, shared) if shared
                      else 0, state=linear_state_elements(kind.mixer_spec), indices=indices)
    att = _mixer(spec, kind)
    if att is None:
        return None
    per_token = kv_elements_per_layer(spec.d_model, att)
    state = _beside_attention_state(kind)
    if kind.attentions > 1:  # a cache layer per attention sublayer, as transformers numbers them
        a = kind.attentions
        indices, n = tuple(i * a + j for i in indices for j in range(a)), n * a
    if kind.mixer in ("sliding", "chunked"):
        return KvPart(kind.mixer, n, per_token, cap=max(kind.window - 1, 1), state=state,
                      indices=indices)
    return KvPart("mla" if att.kv_lora_rank else "full", n, per_token, state=state,
                  indices=indices)


def kv_cache(spec: ModelSpec, seq_len: int, batch: int = 1) -> KvCache:
    """The KV cache of decoding seq_len tokens in each of batch sequences, per layer kind.
    Encoder-only models keep none; an encoder-decoder's decoder also caches cross-attention K
    and V, counted here for a source as long as seq_len."""
    att = spec.attention
    if spec.layers.decoder == 0 or (att is None and not spec.pattern):
        return KvCache("none", 0, 0, seq_len, batch)
    kv_heads = (att.kv_heads or att.heads) if att is not None else 0
    kind = ("state" if att is None else "mla" if att.kv_lora_rank
            else "mha" if kv_heads == att.heads else "mqa" if kv_heads == 1 else "gqa")
    if spec.layers.encoder and att is not None:
        layers = spec.layers.decoder * 2
        parts: tuple[KvPart, ...] = (KvPart("full", layers,
                                            kv_elements_per_layer(spec.d_model, att)),)
    else:
        at: dict[LayerKind, list[int]] = {}
        for i, k in enumerate(spec.decoder_kinds()):
            at.setdefault(k, []).append(i)
        parts = tuple(p for k, ix in at.items() if (p := _kv_part(spec, k, tuple(ix)))
                      is not None)
    held = sum(p.layers for p in parts if p.per_token or p.state)
    return KvCache(kind, held, sum(p.layers * p.per_token for p in parts), seq_len, batch,
                   parts)


# ---------------------------------------------------------------------------------------------
# FLOPs per token, 2 per multiply-add.


def ffn_flops(d_model: int, ffn: FfnSpec) -> int:
    """The matrix products one token goes through: top-k experts, the router, a shared expert."""
    matrices = 3 if ffn.gated else 2
    per_expert = matrices * d_model * ffn.d_ff // ffn.groups
    router = d_model * ffn.experts + shared_router_params(d_model, ffn) if ffn.is_moe else 0
    shared = matrices * d_model * ffn.shared_d_ff + (d_model if ffn.shared_gate else 0)
    adapter = 2 * d_model * ffn.adapter_d_ff if ffn.adapters else 0  # the token's language's
    receptance = d_model * d_model if ffn.channel_mix else 0  # RWKV
    return 2 * (ffn.stack * (ffn.top_k * (per_expert + receptance) + router + shared)
                + adapter)


def attention_projection_flops(d_model: int, att: AttentionSpec) -> int:
    if att.kv_lora_rank:
        return 2 * sum(n_in * n_out for _, n_in, n_out, _ in
                       latent_attention_matrices(d_model, att))
    q_width, kv_width = attention_widths(d_model, att)
    v_width, o_width = value_widths(d_model, att)
    gate = d_model * q_width if att.output_gate else 0
    gate += d_model * att.heads if att.head_gate else 0  # a gate a head (LFM3, Laguna)
    extra = att.extra_projections * d_model * q_width
    conv = sum(weights for _, _, weights, _ in span_conv_matrices(d_model, att))
    no_v = 2 * d_model * v_width if att.values_are_keys else 0  # W_K is also W_V
    return 2 * (d_model * (q_width + o_width) + d_model * (kv_width + v_width) + gate + extra
                + conv) - no_v


def attention_score_flops(d_model: int, att: AttentionSpec, seq_len: int) -> int:
    """Q K^T and the weighted sum of V, one token against seq_len positions."""
    if att.kv_lora_rank:
        v_head_dim = att.v_head_dim or att.head_dim or 0
        return 2 * seq_len * att.heads * ((att.head_dim or 0) + v_head_dim)
    q_width, _ = attention_widths(d_model, att)
    return 2 * seq_len * (q_width + value_widths(d_model, att)[1])


# ---------------------------------------------------------------------------------------------
# The breakdown of a whole model.


@dataclass(frozen=True)
class Flops:
    ffn: int
    attention_projections: int
    attention_scores: int

    @property
    def total(self) -> int:
        return self.ffn + self.attention_projections + self.attention_scores

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 1.0


@dataclass(frozen=True)
class LayerCount:
    kind: str  # "encoder", "decoder", or "ffn" for an FFN-only spec
    count: int
    ffn_rows: tuple[Row, ...]
    attention_rows: tuple[Row, ...]
    ffn: int
    ffn_active: int
    attention: int  # self-attention, plus cross-attention in an encoder-decoder's decoder
    norm: int
    flops: Flops
    indices: tuple[int, ...] = ()  # which decoder layers are of this kind (0-based)
    ffn_active_least: int | None = None  # zero experts: the fewest a token uses (None: ffn_active)
    ffn_spec: FfnSpec | None = None  # the FFN of these layers
    mixer: str = "full"  # the token mixer (spec.MIXERS); window: its window or chunk
    window: int = 0
    other_rows: tuple[Row, ...] = ()  # parts neither attention, FFN nor norm (Gemma 3n)
    other: int = 0
    repeats: int = 1  # times each of these layers runs per token (ALBERT's shared layers)
    norm_unused: int = 0  # norms of the experts a token does not use (Ergo's expert norms)

    @property
    def total(self) -> int:
        return self.ffn + self.attention + self.norm + self.other

    @property
    def active(self) -> int:
        return self.ffn_active + self.attention + self.norm - self.norm_unused + self.other

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 0.0

    @property
    def ffn_active_share(self) -> float:
        return self.ffn_active / self.active if self.active else 0.0


@dataclass(frozen=True)
class ActiveRange:
    """Active parameters per token as a range: ``least`` when a token's choices fall on as
    many zero experts as they can, ``most`` (ModelCount.active) when on none; ``why``."""

    least: int
    most: int
    why: str


@dataclass(frozen=True)
class ModelCount:
    spec: ModelSpec
    layers: tuple[LayerCount, ...]
    other_rows: tuple[Row, ...]  # embeddings, relative bias, final norms, head, pooler
    groups: dict[str, int]  # embeddings / attention / ffn / norms / head / pooler
    head_flops: int

    @property
    def total(self) -> int:
        return sum(self.groups.values())

    @property
    def active(self) -> int:
        unused = sum(layer.count * (layer.total - layer.active) for layer in self.layers)
        return self.total - unused

    @property
    def active_range(self) -> ActiveRange | None:
        """The parameters a token uses when that is not one number (zero experts can take some
        of its top-k choices: LongCat-Flash); the most is ``active``. None otherwise."""
        zero = [layer for layer in self.layers if layer.ffn_active_least is not None]
        fewer = sum(layer.count * (layer.ffn_active - (layer.ffn_active_least or 0))
                    for layer in zero)
        if not fewer:
            return None
        ffn = zero[0].ffn_spec
        assert ffn is not None  # _layer sets it beside ffn_active_least
        k, z = ffn.top_k, ffn.zero_experts
        why = (f"up to {min(k, z)} of a token's top-{k} expert choices can fall on one of {z} "
               "zero (identity) experts, which use no parameters")
        return ActiveRange(self.active - fewer, self.active, why)

    def decoder_ffn(self) -> tuple[int, ...]:
        """Each decoder layer's FFN parameters, in order (experts, shared experts and router
        included)."""
        at = {i: layer.ffn for layer in self.layers for i in layer.indices}
        return tuple(at[i] for i in sorted(at))

    @property
    def flops_ffn(self) -> int:
        return sum(layer.count * layer.repeats * layer.flops.ffn for layer in self.layers)

    @property
    def flops_total(self) -> int:
        return sum(layer.count * layer.repeats * layer.flops.total
                   for layer in self.layers) + self.head_flops

    @property
    def flops_ffn_share(self) -> float:
        return self.flops_ffn / self.flops_total

    def memory_bytes(self) -> dict[str, int]:
        """Weights alone; a mixture of experts needs all experts in memory, not just top-k."""
        return {dtype: self.total * size for dtype, size in BYTES_PER_PARAM.items()}

    def weight_bytes(self) -> dict[str, int]:
        """memory_bytes and int4, two parameters a byte (the scales and zero points of real
        4-bit formats are not included)."""
        return {dtype: (self.total * bits + 7) // 8 for dtype, bits in BITS_PER_PARAM.items()}


def _ffn_rows(d: int, ffn: FfnSpec) -> tuple[Row, ...]:
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
    if ffn.is_moe:
        per_expert = expert_params(d, ffn)
        rows = [Row(f"expert: {r.name}", r.shape, r.params) for r in rows]
        rows.append(Row(f"x {ffn.experts} experts", f"{ffn.experts} x {per_expert:,}",
                        ffn.experts * per_expert))
        over = f" + {d} x {ffn.shared_d_ff // ffn.d_ff} + 1" if ffn.router_shared else ""
        over += f" + {d} + {ffn.experts}" if ffn.router_scales else ""  # Gemma 4's scales
        rows.append(Row("router", f"{d} x {ffn.experts + ffn.zero_experts}{over}",
                        router_params(d, ffn)))
        if ffn.shared_d_ff:
            shared = expert_params(d, FfnSpec(d_ff=ffn.shared_d_ff, gated=ffn.gated,
                                              bias=ffn.bias))
            rows.append(Row("shared expert (every token)", f"d_ff {ffn.shared_d_ff}", shared))
        if ffn.shared_gate:
            rows.append(Row("shared expert gate", f"{d} x 1", d))
    if ffn.stack > 1:
        rows.append(Row(f"x {ffn.stack} FFNs in sequence", f"{ffn.stack} x "
                        f"{expert_params(d, ffn):,}", ffn.stack * expert_params(d, ffn)))
    if ffn.adapters:
        a = ffn.adapter_d_ff
        rows.append(Row(f"x {ffn.adapters} language adapters", f"{d} x {a} x {d}",
                        adapter_params(d, ffn)))
    return tuple(rows)


def _attention_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    sinks = (Row(f"{prefix}sinks", f"{att.heads}", sink_params(att)),) if att.sinks else ()
    if att.kv_lora_rank:  # its head gate one of its matrices
        return tuple(Row(f"{prefix}{name}", f"{n_in} x {n_out}", linear(n_in, n_out, bias))
                     for name, n_in, n_out, bias in latent_attention_matrices(d, att)) + sinks
    q_width, kv_width = attention_widths(d, att)
    v_width, o_width = value_widths(d, att)
    q_out = q_width * (2 if att.output_gate else 1)  # the output gate: as wide again
    qkv = att.qkv_groups
    extra = extra_projection_rows(d, att, prefix) + span_conv_rows(d, att, prefix) \
        + xl_relative_rows(d, att, prefix) + relative_projection_rows(d, att, prefix) \
        + value_conv_rows(att, prefix)
    core: tuple[Row, ...] = (
        Row(f"{prefix}W_Q" + (" (and output gate)" if att.output_gate else ""),
            f"{d} x {q_out}", grouped(d, q_out, att.qkv_bias and att.query_bias, qkv)),
        Row(f"{prefix}W_K", f"{d} x {kv_width}", grouped(d, kv_width,
                                                         att.qkv_bias and att.key_bias, qkv)),
        Row(f"{prefix}W_V", f"{d} x {v_width}", grouped(d, v_width, att.qkv_bias, qkv)),
        Row(f"{prefix}W_O", f"{o_width} x {d}", grouped(o_width, d, att.out_bias,
                                                        att.out_groups)),
    )
    if att.shared_qk:  # Reformer's LSH attention: W_Q is the keys' projection too
        core = tuple(r for r in core if r.name != f"{prefix}W_K")
    if att.values_are_keys:  # Gemma 4's full layers: W_K's keys are the values too
        core = tuple(r for r in core if r.name != f"{prefix}W_V")
    mine = dynamic_mask_rows(d, att, prefix) + lambda_rows(d, att, prefix)
    return extra + core + sinks + gate_rows(d, att, prefix) + mine


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


def cross_attention(att: AttentionSpec) -> AttentionSpec:
    """A decoder layer's cross-attention: the self-attention's projections without the parts
    only self-attention has (global or entity projections, convolutions, relative terms)."""
    return replace(att, extra_projections=0, span_conv=0, xl_relative=False,
                   relative_projection=0, value_conv=0)


def span_conv_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    return tuple(Row(f"{prefix}{name}", shape, weights + biases)
                 for name, shape, weights, biases in span_conv_matrices(d, att))


_PLAIN = LayerKind()  # a layer of the spec's attention and FFN


def _mixer(spec: ModelSpec, kind: LayerKind) -> AttentionSpec | None:
    """The softmax attention of a layer of this kind (None: another mixer, or none)."""
    if kind.mixer in ("linear", "mamba", "conv", "none"):
        return None
    return kind.attention or spec.attention


def mamba_matrices(d_model: int, mix: MambaMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """A Mamba mixer as (name, shape, params): in_proj to the SSM input and its gate, the
    depthwise convolution, x_proj to dt, B and C, dt_proj, A_log and D, out_proj."""
    di, s, r = mix.d_inner, mix.d_state, mix.dt_rank
    rows = (
        ("in_proj", f"{d_model} x {2 * di}", linear(d_model, 2 * di, mix.proj_bias)),
        ("conv1d (depthwise)", f"{di} x {mix.conv_kernel}",
         di * mix.conv_kernel + (di if mix.conv_bias else 0)),
        ("x_proj", f"{di} x {r + 2 * s}", di * (r + 2 * s)),
        ("dt_proj", f"{r} x {di}", linear(r, di, True)),
        ("A_log, D", f"{di} x {s}, {di}", di * s + di),
        ("out_proj", f"{di} x {d_model}", linear(di, d_model, mix.proj_bias)),
    )
    norms = (("dt, B, C norms", f"{r}, {s}, {s}", r + 2 * s),) if mix.bc_dt_norms else ()
    return rows + norms


def mamba2_matrices(d_model: int, mix: Mamba2MixerSpec) -> tuple[tuple[str, str, int], ...]:
    """A Mamba-2 mixer as (name, shape, params): in_proj to the gate, the convolved stream
    (x, B, C) and the per-head time steps; the depthwise convolution; dt_bias, A_log and D per
    head; the gated norm; out_proj."""
    di, h = mix.d_inner, mix.heads
    conv = di + 2 * mix.groups * mix.d_state
    return (
        ("in_proj", f"{d_model} x {di + conv + h}", linear(d_model, di + conv + h,
                                                           mix.proj_bias)),
        ("conv1d (depthwise)", f"{conv} x {mix.conv_kernel}",
         conv * mix.conv_kernel + (conv if mix.conv_bias else 0)),
        ("dt_bias, A_log, D", f"3 x {h}", 3 * h),
        *((("gated norm", f"{di}", di),) if mix.norm else ()),
        ("out_proj", f"{di} x {d_model}", linear(di, d_model, mix.proj_bias)),
    )


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


def model_extra_rows(d: int, layers: int, x: LayerExtrasSpec) -> tuple[Row, ...]:
    """Gemma 3n's parts of the whole model: the per-layer embeddings, the stream's projection
    to the per-layer inputs and its norm, the AltUp projections in and out (n - 1 each)."""
    w, n = layers * x.per_layer_width, x.altup_inputs
    return (
        Row("per-layer embeddings", f"{x.per_layer_vocab} x {w}", x.per_layer_vocab * w),
        Row("per-layer projection and norm", f"{d} x {w} + {x.per_layer_width}",
            d * w + x.per_layer_width),
    ) + ((Row("AltUp projections", f"2 x {n - 1} x {d} x {d}", 2 * (n - 1) * d * d),) if n
         else ())


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


def hyper_head_rows(d: int, n: int) -> tuple[Row, ...]:
    """The hyper-connection head that merges the n streams before the final norm: hc_fn
    (n x n d), hc_base (n) and hc_scale (1)."""
    if not n:
        return ()
    return (Row("hyper-connection head", f"{n} x {n * d} + {n} + 1", n * n * d + n + 1),)


def _linear_mixer_rows(d: int, kind: LayerKind, prefix: str = "") -> tuple[Row, ...]:
    mix = kind.mixer_spec
    if mix is None:
        return ()
    from ffncli.specs.layers import (  # loaded: mix is one
        Mamba2MixerSpec,
        MambaMixerSpec,
        ShortConvSpec,
        SideConvSpec,
    )

    matrices = (short_conv_matrices(d, mix) if isinstance(mix, ShortConvSpec)
                else side_conv_matrices(d, mix) if isinstance(mix, SideConvSpec)
                else mamba_matrices(d, mix) if isinstance(mix, MambaMixerSpec)
                else mamba2_matrices(d, mix) if isinstance(mix, Mamba2MixerSpec)
                else kda_matrices(d, mix) if mix.kind in ("kda", "kda_full")
                else rg_lru_matrices(d, mix) if mix.kind == "rg_lru"
                else mlstm_matrices(d, mix) if mix.kind == "mlstm"
                else rwkv_matrices(d, mix) if mix.kind == "rwkv"
                else lightning_matrices(d, mix) if mix.kind == "lightning"
                else linear_mixer_matrices(d, mix))
    return tuple(Row(prefix + name, shape, n) for name, shape, n in matrices)


def _layer(spec: ModelSpec, name: str, count: int, cross: bool,
           kind: LayerKind = _PLAIN, indices: tuple[int, ...] = ()) -> LayerCount:
    d, att, norm = spec.d_model, _mixer(spec, kind), spec.norm
    ffn = kind.ffn or spec.ffn
    attention_rows = _linear_mixer_rows(d, kind)
    proj_flops = 2 * sum(r.params for r in attention_rows)
    score_flops = 0
    if att is not None:
        beside = _linear_mixer_rows(d, kind, _beside_prefix(kind.mixer_spec)) \
            if kind.mixer_spec is not None else ()  # a mixer beside attention (Falcon-H1)
        attention_rows = _attention_rows(d, att, "")
        if kind.shares_kv:  # no K and V of its own (Gemma 3n's last layers)
            attention_rows = tuple(r for r in attention_rows if r.name not in ("W_K", "W_V"))
        attention_rows += beside
        proj_flops = attention_projection_flops(d, att) + 2 * sum(r.params for r in beside)
        window = kind.window if kind.mixer in ("sliding", "chunked") else 0
        score_flops = attention_score_flops(d, att, min(spec.seq_len, window or spec.seq_len))
        if cross:
            attention_rows += _attention_rows(d, cross_attention(att), "cross ")
            proj_flops *= 2
            score_flops *= 2
        attention_rows = _sublayers(attention_rows, kind.attentions)
        proj_flops, score_flops = proj_flops * kind.attentions, score_flops * kind.attentions
    per_layer = (kind.norms if kind.norms is not None else norm.per_layer) if norm else 0
    norms = (per_layer + (norm.cross if cross else 0)) * norm_params(d, norm) if norm else 0
    norms += sub_norm_params(d, ffn, norm) + residual_scale_params(d, norm) if norm else 0
    if att is not None:
        qk = qk_norm_params(d, att)
        norms += ((qk - k_norm_params(d, att) if kind.shares_kv else qk) * (2 if cross else 1)
                  * kind.attentions)
    experts_norms, used_norms = expert_norm_params(d, ffn) if kind.has_ffn else (0, 0)
    norms += experts_norms
    extra = (layer_extra_rows(d, spec.extras) if spec.extras else ()) + norm_gate_rows(d, kind) \
        + hyper_rows(d, spec.hyper_streams)
    if spec.bottleneck is not None and norm is not None:
        extra += bottleneck_layer_rows(d, spec.bottleneck, norm, att)
    layer = LayerCount(
        kind=name,
        count=count,
        ffn_rows=_ffn_rows(d, ffn) if kind.has_ffn else (),
        attention_rows=attention_rows,
        ffn=ffn_params(d, ffn) if kind.has_ffn else 0,
        ffn_active=ffn_active_params(d, ffn) if kind.has_ffn else 0,
        attention=sum(r.params for r in attention_rows),
        norm=norms,
        other_rows=extra,
        other=sum(r.params for r in extra),
        flops=Flops(ffn_flops(d, ffn) if kind.has_ffn else 0, proj_flops, score_flops),
        indices=indices,
        mixer=kind.mixer,
        window=kind.window,
        ffn_active_least=ffn_active_min_params(d, ffn) if kind.has_ffn and ffn.zero_experts
        else None,
        ffn_spec=ffn,
        norm_unused=experts_norms - used_norms,
    )
    return layer if kind.shared is None else _with_shared_block(spec, kind, layer)


# --- issue 40, hybrids: Zamba's shared transformer block ---------------------------------------


def _beside_prefix(mix: object) -> str:
    """How the rows of a mixer beside attention are named: linear or mamba, or plainly
    (Inkling's convolutions)."""
    from ffncli.specs.layers import LinearMixerSpec, SideConvSpec  # loaded: mix is one

    return "linear " if isinstance(mix, LinearMixerSpec) else "" if isinstance(
        mix, SideConvSpec) else "mamba "


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
    return attention, _ffn_rows(d, ffn) + adapters


def _with_shared_block(spec: ModelSpec, kind: LayerKind, layer: LayerCount) -> LayerCount:
    """A layer that also runs the shared block (kind.shared): its own d x d projection, and
    where it holds the block, the block's attention, FFN and two norms (elsewhere its FFN
    counts 0). Every layer using the block does its FLOPs."""
    blk, att, ffn, d = kind.shared, kind.attention, kind.ffn or spec.ffn, spec.d_model
    assert blk is not None and att is not None  # the readers give a shared block its attention
    attention, ffn_rows = shared_block_rows(d, att, ffn, blk)
    own = (Row("W_in (its own)", f"{d} x {d}", d * d),)
    held = blk.owner
    norms = norm_params(blk.input_width, spec.norm) + norm_params(d, spec.norm) \
        if held and spec.norm else 0
    ffn_params = sum(r.params for r in ffn_rows)
    w, r = blk.input_width, blk.adapter_rank  # a token goes through its layer's adapters alone
    q, kv = attention_widths(d, att)
    up = 2 * ffn.d_ff if ffn.gated else ffn.d_ff
    flops = Flops(ffn_flops(d, ffn) + 2 * (d * r + r * up),
                  layer.flops.attention_projections + 2 * (w * (q + 2 * kv) + q * d + d * d
                                                           + blk.attention_adapters * 6 * w * r),
                  layer.flops.attention_scores + attention_score_flops(d, att, spec.seq_len))
    attention_rows = layer.attention_rows + own + (attention if held else ())
    return replace(layer, attention_rows=attention_rows,
                   attention=sum(r.params for r in attention_rows),
                   ffn_rows=ffn_rows if held else (), ffn=ffn_params if held else 0,
                   ffn_active=ffn_params if held else 0, norm=layer.norm + norms, flops=flops)


def _sublayers(rows: tuple[Row, ...], n: int) -> tuple[Row, ...]:
    """The rows of n attention sublayers of one layer (LongCat-Flash: 2), numbered."""
    if n == 1:
        return rows
    return tuple(Row(f"{i + 1}: {r.name}", r.shape, r.params) for i in range(n) for r in rows)


def _decoder_layers(spec: ModelSpec, cross: bool) -> list[LayerCount]:
    """The decoder's layers, those of one kind counted together, kinds in order of first
    appearance (DeepSeek's dense first layers, then its MoE layers)."""
    at: dict[LayerKind, list[int]] = {}
    for i, kind in enumerate(spec.decoder_kinds()):
        at.setdefault(kind, []).append(i)
    return [_layer(spec, kind.name, len(ix), cross, kind, tuple(ix)) for kind, ix in at.items()]


def _encoder_layers(spec: ModelSpec) -> list[LayerCount]:
    """The encoder's layers: by kind when encoder_pattern gives them (Switch Transformers'
    sparse layers), else all alike; ALBERT's layers.shared distinct layers counted once each,
    each run layers.encoder / layers.shared times."""
    if spec.encoder_pattern:
        at: dict[LayerKind, int] = {}
        for kind in spec.encoder_pattern:
            at[kind] = at.get(kind, 0) + 1
        return [_layer(spec, kind.name, n, False, kind) for kind, n in at.items()]
    distinct = spec.layers.shared or spec.layers.encoder
    shared = distinct < spec.layers.encoder
    layer = _layer(spec, "shared encoder" if shared else "encoder", distinct, cross=False)
    return [replace(layer, repeats=spec.layers.encoder // distinct)]


def _embedding_rows(spec: ModelSpec) -> tuple[Row, ...]:
    emb, d = spec.embeddings, spec.d_model
    if emb is None:
        return ()
    dim = emb.dim or d
    rows = [Row("word embeddings", f"{emb.vocab} x {dim}", emb.vocab * dim)]
    if emb.decoder_vocab:
        rows.append(Row("decoder word embeddings", f"{emb.decoder_vocab} x {dim}",
                        emb.decoder_vocab * dim))
    if emb.factorized:
        return tuple(rows + _factorized_rows(emb, d))
    if dim != d:
        rows += [Row("project in", f"{dim} x {d}", dim * d),
                 Row("project out", f"{d} x {dim}", d * dim)]
    if emb.positions:
        n, w = emb.positions + emb.position_offset, emb.position_dim or d
        rows.append(Row("position embeddings", f"{n} x {w}", n * w))
        if _stack_copies(spec) > 1:
            n = emb.decoder_positions or n
            rows.append(Row("decoder position embeddings", f"{n} x {w}", n * w))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {d}", emb.token_types * d))
        if _stack_copies(spec) > 1:
            rows.append(Row("decoder token-type embeddings", f"{emb.token_types} x {d}",
                            emb.token_types * d))
    if emb.relative:
        rows.append(Row("relative position embeddings", f"{emb.relative} x {d}",
                        emb.relative * d))
    if emb.mask:
        rows.append(Row("mask embedding", f"{d}", d))
    if emb.project:
        rows.append(Row("embedding projection (with bias)", f"{d} x {d}", linear(d, d, True)))
    if emb.axial:
        shapes = " + ".join(f"{n} x {w}" for n, w in emb.axial)
        rows.append(Row("axial position embeddings", shapes, sum(n * w for n, w in emb.axial)))
    if emb.extra_rows:
        rows.append(Row("extra embedding rows", f"{emb.extra_rows} x {d}",
                        emb.extra_rows * d))
    return tuple(rows) + side_table_rows(emb, d) + entity_rows(emb, d)


def side_table_rows(emb: EmbeddingsSpec, d: int) -> tuple[Row, ...]:
    """RoCBert: more tables beside the word table, each token's vectors joined and projected
    back to d_model (with a bias)."""
    if not emb.side_tables:
        return ()
    joined = d + sum(width for _, width in emb.side_tables)
    return tuple(Row("side table", f"{n} x {w}", n * w) for n, w in emb.side_tables) + (
        Row("joined tables' projection (with bias)", f"{joined} x {d}", linear(joined, d, True)),)


def entity_rows(emb: EmbeddingsSpec, d: int) -> tuple[Row, ...]:
    """LUKE's entity embeddings: the entity table, its projection to d_model (without bias)
    when narrower, entity position and token-type tables (as the words'); the norm apart."""
    if not emb.entities:
        return ()
    w = emb.entity_dim or d
    rows = [Row("entity embeddings", f"{emb.entities} x {w}", emb.entities * w)]
    if w != d:
        rows.append(Row("entity projection", f"{w} x {d}", w * d))
    if emb.positions:
        rows.append(Row("entity position embeddings", f"{emb.positions} x {d}",
                        emb.positions * d))
    if emb.token_types:
        rows.append(Row("entity token-type embeddings", f"{emb.token_types} x {d}",
                        emb.token_types * d))
    return tuple(rows)


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


def bottleneck_model_rows(b: BottleneckSpec, norm: NormSpec) -> dict[str, tuple[Row, ...]]:
    """MobileBERT's embeddings (outer wide: the word table, its projection from the word
    vector, with its neighbours' under trigram, positions, token types, the norm) and its
    pooler, by group."""
    o, e = b.outer, b.embedding * (3 if b.trigram else 1)
    return {
        "embeddings": (
            Row("word embeddings", f"{b.vocab} x {b.embedding}", b.vocab * b.embedding),
            Row("embedding projection (with bias)", f"{e} x {o}", linear(e, o, True)),
            Row("position embeddings", f"{b.positions} x {o}", b.positions * o),
            Row("token-type embeddings", f"{b.token_types} x {o}", b.token_types * o)),
        "norms": (Row("embedding norm", f"{o}", norm_params(o, norm)),),
        "pooler": (Row("pooler", f"{o} x {o}", linear(o, o, True)),) if b.pooler else (),
    }


def _stack_copies(spec: ModelSpec) -> int:
    """2 when each stack of an encoder-decoder has its own position table and embedding norm
    (EmbeddingsSpec.per_stack), else 1."""
    emb = spec.embeddings
    both = spec.layers.encoder > 0 and spec.layers.decoder > 0
    return 2 if emb is not None and emb.per_stack and both else 1


def _factorized_rows(emb: EmbeddingsSpec, d: int) -> list[Row]:
    """ELECTRA: positions and token types as wide as the word table, then dim -> d_model."""
    dim = emb.dim or d
    rows = []
    if emb.positions:
        n, w = emb.positions + emb.position_offset, emb.position_dim or dim
        rows.append(Row("position embeddings", f"{n} x {w}", n * w))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {dim}",
                        emb.token_types * dim))
    if dim != d:
        rows.append(Row("project in (with bias)", f"{dim} x {d}", linear(dim, d, True)))
    return rows


def count(spec: ModelSpec) -> ModelCount:
    """Every parameter of the spec, by layer kind and by group."""
    layers: list[LayerCount] = []
    stacks = 0
    if spec.ffn_only:
        layers.append(_layer(spec, "ffn", 1, cross=False))
    else:
        if spec.layers.encoder:
            layers += _encoder_layers(spec)
            stacks += 1
        if spec.layers.decoder:
            cross = spec.layers.encoder > 0 or spec.layers.cross
            layers += _decoder_layers(spec, cross=cross and not spec.layers.merged_cross)
            stacks += 1
    d, emb, norm, att = spec.d_model, spec.embeddings, spec.norm, spec.attention
    groups = {
        "embeddings": 0,
        "attention": sum(layer.count * layer.attention for layer in layers),
        "ffn": sum(layer.count * layer.ffn for layer in layers),
        "norms": sum(layer.count * layer.norm for layer in layers),
        "head": 0,
        "pooler": 0,
    }
    rows = list(_embedding_rows(spec))
    groups["embeddings"] = sum(r.params for r in rows)
    if emb is not None and emb.norm and norm is not None:
        width = (emb.dim or d) if emb.factorized else d
        rows.append(Row("embedding norm", f"{width}", norm_params(width, norm)))
        groups["norms"] += norm_params(width, norm)
        if _stack_copies(spec) > 1:
            rows.append(Row("decoder embedding norm", f"{width}", norm_params(width, norm)))
            groups["norms"] += norm_params(width, norm)
    if emb is not None and emb.entities and norm is not None:
        rows.append(Row("entity embedding norm", f"{d}", norm_params(d, norm)))
        groups["norms"] += norm_params(d, norm)
    if emb is not None and emb.relative and emb.relative_norm and norm is not None:
        rows.append(Row("relative embedding norm", f"{d}", norm_params(d, norm)))
        groups["norms"] += norm_params(d, norm)
    if att is not None and att.relative_buckets:
        table = att.relative_buckets * att.heads
        tables = spec.layers.encoder + spec.layers.decoder if att.relative_per_layer else stacks
        rows.append(Row("relative position bias", f"{tables} x {att.relative_buckets} x "
                        f"{att.heads}", tables * table))
        groups["attention"] += tables * table
    if norm is not None and norm.final:
        final = norm if norm.final_bias is None else replace(norm, bias=norm.final_bias)
        width = norm.final_width or d
        rows.append(Row("final norm", f"{stacks} x {width}", stacks * norm_params(width, final)))
        groups["norms"] += stacks * norm_params(width, final)
    head_flops = 0
    if emb is not None and emb.head != "none":
        dim, vocab = emb.dim or d, emb.decoder_vocab or emb.vocab
        weight = vocab * dim if emb.head == "untied" else 0
        bias = vocab if emb.head_bias else 0
        label = "output head (tied to word embeddings)" if emb.head == "tied" else "output head"
        rows.append(Row(label, f"{dim} x {vocab}", weight + bias))
        groups["head"] = weight + bias
        if emb.head_transform and norm is not None:
            transform = linear(d, d, emb.head_transform_bias) + norm_params(d, norm)
            rows.append(Row("head transform (dense and norm)", f"{d} x {d}, {d}", transform))
            groups["head"] += transform
        head_flops = 2 * dim * vocab
    if spec.pooler:
        rows.append(Row("pooler", f"{d} x {d}", linear(d, d, True)))
        groups["pooler"] = linear(d, d, True)
    added = latent_rows(d, spec.latents) if spec.latents is not None else {}
    if spec.bottleneck is not None and norm is not None:
        added = bottleneck_model_rows(spec.bottleneck, norm)
        groups["other"] = sum(layer.count * layer.other for layer in layers)
    for group, parts in added.items():
        rows += parts
        groups[group] += sum(r.params for r in parts)
    if spec.extras is not None:
        embedding, *other = model_extra_rows(d, spec.layers.decoder, spec.extras)
        rows += [embedding, *other]
        groups["embeddings"] += embedding.params
        groups["other"] = sum(layer.count * layer.other for layer in layers) + sum(
            r.params for r in other)
    elif any(layer.other for layer in layers):  # A.X-K2's norm gates, hyper-connections
        head = hyper_head_rows(d, spec.hyper_streams)
        rows += head
        groups["other"] = sum(layer.count * layer.other for layer in layers) + sum(
            r.params for r in head)
    return ModelCount(spec, tuple(layers), tuple(rows), groups, head_flops)
