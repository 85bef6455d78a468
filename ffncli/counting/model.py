"""Parameters, FLOPs and weight memory of a spec: pure integer arithmetic, one function a formula.

Counting follows the reference implementations (Hugging Face classes, the 2017 paper): tied
weights are counted once, buffers never. FLOPs are 2 per multiply-add of the matrix products
(biases, activations, norms and softmax are left out, as in Kaplan et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerExtrasSpec,
    LayerKind,
    LinearMixerSpec,
    Mamba2MixerSpec,
    MambaMixerSpec,
    ModelSpec,
    NormSpec,
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


def expert_params(d_model: int, ffn: FfnSpec) -> int:
    """One FFN: W1, W2 (and V when gated), with their biases, and the activation's scalars."""
    up = linear(d_model, ffn.d_ff, ffn.bias)
    down = linear(ffn.d_ff, d_model, ffn.bias)
    return (2 * up if ffn.gated else up) + down + activation_params(ffn)


def router_params(d_model: int, ffn: FfnSpec) -> int:
    """The router's projection (and bias), and with router_scales its input's per-channel
    scale and a scale per expert (Gemma 4)."""
    if ffn.router_scales and ffn.is_moe:
        return linear(d_model, ffn.experts, ffn.router_bias) + d_model + ffn.experts
    return linear(d_model, ffn.experts, ffn.router_bias) if ffn.is_moe else 0


def shared_expert_params(d_model: int, ffn: FfnSpec) -> int:
    """The shared expert every token goes through (an FFN of width shared_d_ff, gated as the
    routed experts are), and its gate, a d_model -> 1 projection without bias (Qwen2-MoE)."""
    if not ffn.shared_d_ff:
        return 0
    shared = expert_params(d_model, FfnSpec(d_ff=ffn.shared_d_ff, gated=ffn.gated,
                                            bias=ffn.bias))
    return shared + (d_model if ffn.shared_gate else 0)


def ffn_params(d_model: int, ffn: FfnSpec) -> int:
    return (ffn.experts * expert_params(d_model, ffn) + router_params(d_model, ffn)
            + shared_expert_params(d_model, ffn))


def ffn_active_params(d_model: int, ffn: FfnSpec) -> int:
    """What one token uses: its top-k experts, the router and any shared expert."""
    return (ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)
            + shared_expert_params(d_model, ffn))


def attention_widths(d_model: int, att: AttentionSpec) -> tuple[int, int]:
    """(width of Q and of the output projection's input, width of K and of V)."""
    head_dim = att.head_dim or d_model // att.heads
    return att.heads * head_dim, (att.kv_heads or att.heads) * head_dim


def latent_attention_matrices(d_model: int, att: AttentionSpec) -> tuple[tuple[str, int, int,
                                                                                bool], ...]:
    """Multi-head latent attention (DeepSeek-V2/V3) as (name, n_in, n_out, bias) projections:
    queries straight from x or through a q_lora_rank bottleneck; one projection to the KV latent
    plus a shared rope key; the latent expanded to every head's key (nope part) and value."""
    h, qk, v = att.heads, att.head_dim or 0, att.v_head_dim or att.head_dim or 0
    nope, bias = qk - att.rope_head_dim, att.qkv_bias
    q: tuple[tuple[str, int, int, bool], ...]
    if att.q_lora_rank:
        q = (("W_Q_a", d_model, att.q_lora_rank, bias), ("W_Q_b", att.q_lora_rank, h * qk, False))
    else:
        q = (("W_Q", d_model, h * qk, False),)
    return q + (
        ("W_KV_a", d_model, att.kv_lora_rank + att.rope_head_dim, bias),
        ("W_KV_b", att.kv_lora_rank, h * (nope + v), False),
        ("W_O", h * v, d_model, att.out_bias),
    )


def qk_norm_params(d_model: int, att: AttentionSpec) -> int:
    """Norms on queries and keys, and latent attention's norms on its two latents."""
    if att.kv_lora_rank:
        return att.kv_lora_rank + att.q_lora_rank  # RMSNorm weights
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
                   for _, n_in, n_out, bias in latent_attention_matrices(d_model, att))
    return sum(r.params for r in _attention_rows(d_model, att, ""))


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


def xl_relative_params(d_model: int, att: AttentionSpec) -> int:
    """XLNet's relative attention beside Q, K, V and O: r, the projection of the relative
    positions (d_model x heads * head_dim), the r_w, r_r and r_s biases and two segment
    embeddings (heads * head_dim each)."""
    q_width = attention_widths(d_model, att)[0]
    return d_model * q_width + 5 * q_width if att.xl_relative else 0


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
    indices: tuple[int, ...] = ()  # which decoder layers (0-based; empty for every layer)

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
    compressed latent and the shared rope key (what transformers 5 caches for DeepSeek-V3)."""
    if att.kv_lora_rank:
        return att.kv_lora_rank + att.rope_head_dim
    _, kv_width = attention_widths(d_model, att)
    return 2 * kv_width


def linear_state_elements(mix: LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec) -> int:
    """A fixed state: Gated DeltaNet's convolution's last conv_kernel inputs (Q, K and V) and
    one k_head_dim x v_head_dim matrix per value head; Mamba's convolution inputs and its
    d_inner x d_state SSM state."""
    if isinstance(mix, MambaMixerSpec):
        return mix.d_inner * (mix.conv_kernel + mix.d_state)
    if isinstance(mix, Mamba2MixerSpec):  # the convolved stream's inputs, a state per head
        conv = mix.d_inner + 2 * mix.groups * mix.d_state
        return conv * mix.conv_kernel + mix.d_inner * mix.d_state
    conv = 2 * mix.k_heads * mix.k_head_dim + mix.v_heads * mix.v_head_dim
    return conv * mix.conv_kernel + mix.v_heads * mix.k_head_dim * mix.v_head_dim


def _kv_part(spec: ModelSpec, kind: LayerKind, indices: tuple[int, ...]) -> KvPart | None:
    """A kind of layer's cache: sliding and chunked layers keep the last window - 1 tokens
    (transformers' DynamicSlidingWindowLayer), a layer reading another's KV keeps none."""
    n = len(indices)
    if kind.shares_kv:
        return KvPart("shared", n, 0, indices=indices)
    if kind.mixer in ("linear", "mamba") and kind.mixer_spec is not None:
        return KvPart(kind.mixer, n, 0, state=linear_state_elements(kind.mixer_spec),
                      indices=indices)
    att = _mixer(spec, kind)
    if att is None:
        return None
    per_token = kv_elements_per_layer(spec.d_model, att)
    if kind.mixer in ("sliding", "chunked"):
        return KvPart(kind.mixer, n, per_token, cap=max(kind.window - 1, 1), indices=indices)
    return KvPart("mla" if att.kv_lora_rank else "full", n, per_token, indices=indices)


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
    per_expert = matrices * d_model * ffn.d_ff
    router = d_model * ffn.experts if ffn.is_moe else 0
    shared = matrices * d_model * ffn.shared_d_ff + (d_model if ffn.shared_gate else 0)
    return 2 * (ffn.top_k * per_expert + router + shared)


def attention_projection_flops(d_model: int, att: AttentionSpec) -> int:
    if att.kv_lora_rank:
        return 2 * sum(n_in * n_out for _, n_in, n_out, _ in
                       latent_attention_matrices(d_model, att))
    q_width, kv_width = attention_widths(d_model, att)
    gate = d_model * q_width if att.output_gate else 0
    no_v = 2 * d_model * kv_width if att.values_are_keys else 0  # W_K is also W_V
    return 2 * (2 * d_model * q_width + 2 * d_model * kv_width + gate) - no_v


def attention_score_flops(d_model: int, att: AttentionSpec, seq_len: int) -> int:
    """Q K^T and the weighted sum of V, one token against seq_len positions."""
    if att.kv_lora_rank:
        v_head_dim = att.v_head_dim or att.head_dim or 0
        return 2 * seq_len * att.heads * ((att.head_dim or 0) + v_head_dim)
    q_width, _ = attention_widths(d_model, att)
    return 2 * 2 * seq_len * q_width


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
    mixer: str = "full"  # the token mixer (spec.MIXERS); window: its window or chunk
    window: int = 0
    other_rows: tuple[Row, ...] = ()  # parts neither attention, FFN nor norm (Gemma 3n)
    other: int = 0

    @property
    def total(self) -> int:
        return self.ffn + self.attention + self.norm + self.other

    @property
    def active(self) -> int:
        return self.ffn_active + self.attention + self.norm + self.other

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 0.0

    @property
    def ffn_active_share(self) -> float:
        return self.ffn_active / self.active if self.active else 0.0


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
        unused = sum(layer.count * (layer.ffn - layer.ffn_active) for layer in self.layers)
        return self.total - unused

    def decoder_ffn(self) -> tuple[int, ...]:
        """Each decoder layer's FFN parameters, in order (experts, shared experts and router
        included)."""
        at = {i: layer.ffn for layer in self.layers for i in layer.indices}
        return tuple(at[i] for i in sorted(at))

    @property
    def flops_ffn(self) -> int:
        return sum(layer.count * layer.flops.ffn for layer in self.layers)

    @property
    def flops_total(self) -> int:
        return sum(layer.count * layer.flops.total for layer in self.layers) + self.head_flops

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
    if ffn.gated:
        rows = [Row("W (gate, activated)", f"{d} x {f}", d * f)]
        rows += [Row("b", f"{f}", f)] if biases else []
        rows += [Row("V (up, linear)", f"{d} x {f}", d * f)]
        rows += [Row("c", f"{f}", f)] if biases else []
    else:
        rows = [Row("W1", f"{d} x {f}", d * f)] + ([Row("b1", f"{f}", f)] if biases else [])
    rows += [Row("W2", f"{f} x {d}", f * d)] + ([Row("b2", f"{d}", d)] if biases else [])
    if activation_params(ffn):
        rows += [Row(f"{ffn.activation} scalars", f"{activation_params(ffn)}",
                     activation_params(ffn))]
    if ffn.is_moe:
        per_expert = expert_params(d, ffn)
        rows = [Row(f"expert: {r.name}", r.shape, r.params) for r in rows]
        rows.append(Row(f"x {ffn.experts} experts", f"{ffn.experts} x {per_expert:,}",
                        ffn.experts * per_expert))
        scales = f" + {d} + {ffn.experts}" if ffn.router_scales else ""
        rows.append(Row("router" + (" and its scales" if scales else ""),
                        f"{d} x {ffn.experts}{scales}", router_params(d, ffn)))
        if ffn.shared_d_ff:
            shared = expert_params(d, FfnSpec(d_ff=ffn.shared_d_ff, gated=ffn.gated,
                                              bias=ffn.bias))
            rows.append(Row("shared expert (every token)", f"d_ff {ffn.shared_d_ff}", shared))
        if ffn.shared_gate:
            rows.append(Row("shared expert gate", f"{d} x 1", d))
    return tuple(rows)


def _attention_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    if att.kv_lora_rank:
        return tuple(Row(f"{prefix}{name}", f"{n_in} x {n_out}", linear(n_in, n_out, bias))
                     for name, n_in, n_out, bias in latent_attention_matrices(d, att))
    q_width, kv_width = attention_widths(d, att)
    sinks: tuple[Row, ...] = (Row(f"{prefix}sinks", f"{att.heads}", sink_params(att)),) \
        if att.sinks else ()
    if att.dynamic_mask:
        sinks += (Row(f"{prefix}dt_proj and A (dynamic mask)", f"{kv_width} x "
                      f"{att.kv_heads or att.heads} + {att.kv_heads or att.heads}",
                      dynamic_mask_params(d, att)),)
    if att.xl_relative:
        sinks += (Row(f"{prefix}W_R, r_w/r_r/r_s biases, segment embeddings",
                      f"{d} x {q_width} + 5 x {q_width}", xl_relative_params(d, att)),)
    if att.differential:
        sinks += (Row(f"{prefix}lambdas (q1, k1, q2, k2)", f"4 x {lambda_params(d, att) // 4}",
                      lambda_params(d, att)),)
    q_out = q_width * (2 if att.output_gate else 1)  # the output gate: as wide again
    return (
        Row(f"{prefix}W_Q" + (" (and output gate)" if att.output_gate else ""),
            f"{d} x {q_out}", linear(d, q_out, att.qkv_bias)),
        Row(f"{prefix}W_K", f"{d} x {kv_width}", linear(d, kv_width, att.qkv_bias)),
    ) + (() if att.values_are_keys else (
        Row(f"{prefix}W_V", f"{d} x {kv_width}", linear(d, kv_width, att.qkv_bias)),)) + (
        Row(f"{prefix}W_O", f"{q_width} x {d}", linear(q_width, d, att.out_bias)),
    ) + sinks


_PLAIN = LayerKind()  # a layer of the spec's attention and FFN


def _mixer(spec: ModelSpec, kind: LayerKind) -> AttentionSpec | None:
    """The softmax attention of a layer of this kind (None: another mixer, or none)."""
    if kind.mixer in ("linear", "mamba", "none"):
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
        ("gated norm", f"{di}", di),
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


def _linear_mixer_rows(d: int, kind: LayerKind) -> tuple[Row, ...]:
    mix = kind.mixer_spec
    if mix is None:
        return ()
    matrices = (mamba_matrices(d, mix) if isinstance(mix, MambaMixerSpec)
                else mamba2_matrices(d, mix) if isinstance(mix, Mamba2MixerSpec)
                else linear_mixer_matrices(d, mix))
    return tuple(Row(name, shape, n) for name, shape, n in matrices)


def _layer(spec: ModelSpec, name: str, count: int, cross: bool,
           kind: LayerKind = _PLAIN, indices: tuple[int, ...] = ()) -> LayerCount:
    d, att, norm = spec.d_model, _mixer(spec, kind), spec.norm
    ffn = kind.ffn or spec.ffn
    attention_rows = _linear_mixer_rows(d, kind)
    proj_flops = 2 * sum(r.params for r in attention_rows)
    score_flops = 0
    if att is not None:
        attention_rows = _attention_rows(d, att, "")
        if kind.shares_kv:  # no K and V of its own (Gemma 3n's last layers)
            attention_rows = tuple(r for r in attention_rows if r.name not in ("W_K", "W_V"))
        proj_flops = attention_projection_flops(d, att)
        window = kind.window if kind.mixer in ("sliding", "chunked") else 0
        score_flops = attention_score_flops(d, att, min(spec.seq_len, window or spec.seq_len))
        if cross:
            attention_rows += _attention_rows(d, att, "cross ")
            proj_flops *= 2
            score_flops *= 2
    norms = (norm.per_layer + (1 if cross else 0)) * norm_params(d, norm) if norm else 0
    norms += sub_norm_params(d, ffn, norm) + residual_scale_params(d, norm) if norm else 0
    if att is not None:
        qk = qk_norm_params(d, att)
        norms += (qk - k_norm_params(d, att) if kind.shares_kv else qk) * (2 if cross else 1)
    extra = layer_extra_rows(d, spec.extras) if spec.extras else ()
    return LayerCount(
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
    )


def _decoder_layers(spec: ModelSpec, cross: bool) -> list[LayerCount]:
    """The decoder's layers, those of one kind counted together, kinds in order of first
    appearance (DeepSeek's dense first layers, then its MoE layers)."""
    at: dict[LayerKind, list[int]] = {}
    for i, kind in enumerate(spec.decoder_kinds()):
        at.setdefault(kind, []).append(i)
    return [_layer(spec, kind.name, len(ix), cross, kind, tuple(ix)) for kind, ix in at.items()]


def _embedding_rows(spec: ModelSpec) -> tuple[Row, ...]:
    emb, d = spec.embeddings, spec.d_model
    if emb is None:
        return ()
    dim = emb.dim or d
    rows = [Row("word embeddings", f"{emb.vocab} x {dim}", emb.vocab * dim)]
    if emb.factorized:
        return tuple(rows + _factorized_rows(emb, d))
    if dim != d:
        rows += [Row("project in", f"{dim} x {d}", dim * d),
                 Row("project out", f"{d} x {dim}", d * dim)]
    if emb.positions:
        n = emb.positions + emb.position_offset
        rows.append(Row("position embeddings", f"{n} x {d}", n * d))
        if _stack_copies(spec) > 1:
            rows.append(Row("decoder position embeddings", f"{n} x {d}", n * d))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {d}", emb.token_types * d))
    if emb.relative:
        rows.append(Row("relative position embeddings", f"{emb.relative} x {d}",
                        emb.relative * d))
    if emb.mask:
        rows.append(Row("mask embedding", f"{d}", d))
    return tuple(rows)


def head_transform_rows(d: int, emb: EmbeddingsSpec, norm: NormSpec | None) -> tuple[Row, ...]:
    """ModernBERT-decoder's prediction head before the output head: a d x d layer (a bias by
    head_transform_bias) and a norm."""
    if not emb.head_transform:
        return ()
    return (Row("head transform", f"{d} x {d}", linear(d, d, emb.head_transform_bias)),
            Row("head transform norm", f"{d}", norm_params(d, norm) if norm else 0))


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
        n = emb.positions + emb.position_offset
        rows.append(Row("position embeddings", f"{n} x {dim}", n * dim))
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
            layers.append(_layer(spec, "encoder", spec.layers.encoder, cross=False))
            stacks += 1
        if spec.layers.decoder:
            layers += _decoder_layers(spec, cross=spec.layers.encoder > 0)
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
        rows.append(Row("final norm", f"{stacks} x {d}", stacks * norm_params(d, norm)))
        groups["norms"] += stacks * norm_params(d, norm)
    head_flops = 0
    if emb is not None and emb.head != "none":
        dim = emb.dim or d
        weight = emb.vocab * dim if emb.head == "untied" else 0
        bias = emb.vocab if emb.head_bias else 0
        label = "output head (tied to word embeddings)" if emb.head == "tied" else "output head"
        rows.append(Row(label, f"{dim} x {emb.vocab}", weight + bias))
        groups["head"] = weight + bias
        head_flops = 2 * dim * emb.vocab
        for row in head_transform_rows(d, emb, norm):
            rows.append(row)
            groups["norms" if row.name.endswith("norm") else "head"] += row.params
        head_flops += 2 * d * d if emb.head_transform else 0
    if spec.pooler:
        rows.append(Row("pooler", f"{d} x {d}", linear(d, d, True)))
        groups["pooler"] = linear(d, d, True)
    if spec.extras is not None:
        embedding, *other = model_extra_rows(d, spec.layers.decoder, spec.extras)
        rows += [embedding, *other]
        groups["embeddings"] += embedding.params
        groups["other"] = sum(layer.count * layer.other for layer in layers) + sum(
            r.params for r in other)
    return ModelCount(spec, tuple(layers), tuple(rows), groups, head_flops)
