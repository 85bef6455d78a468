"""Typed, frozen model specs, validated once; built-in YAML presets.

A spec describes an architecture, not weights: widths, the FFN's activation and gating, the
attention's heads, the norms, the layer stacks and the embeddings. ``counting`` turns it into
parameter counts; ``ffn`` and ``weights`` turn its FFN part into a function.

This module must not import NumPy: ``ffncli params`` is integer arithmetic and starts fast.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ffncli.base import validate
from ffncli.base.validate import suggest
from ffncli.errors import SpecError, shown

# Activations applied elementwise. ``gelu`` is the exact (erf) GELU; ``gelu_tanh`` is the tanh
# approximation (GPT-2's ``gelu_new``, PyTorch's ``approximate="tanh"``). ``swish`` is
# ``silu`` with a ``beta`` other than 1.
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swish", "sigmoid", "identity")

# The GLU family (Shazeer, 2020): act(x W + b) * (x V + c), each name a gated activation.
GLU_VARIANTS = {
    "glu": "sigmoid",
    "reglu": "relu",
    "geglu": "gelu",
    "swiglu": "silu",
    "bilinear": "identity",
}

NormKind = Literal["layernorm", "rmsnorm"]
HeadKind = Literal["tied", "untied", "none"]


@dataclass(frozen=True)
class FfnSpec:
    """The position-wise FFN of one layer: d_model -> d_ff -> d_model."""

    d_ff: int
    activation: str = "relu"
    gated: bool = False  # act(x W + b) * (x V + c): W is activated, V is not
    bias: bool = True  # biases on every projection of the FFN
    beta: float = 1.0  # Swish_beta(x) = x * sigmoid(beta * x); 1 for silu
    experts: int = 1  # > 1: mixture of experts, each expert one FFN of this shape
    top_k: int = 1
    router_bias: bool = False
    capacity_factor: float | None = None  # MoE only: drop tokens past ceil(cf * n * k / E)
    shared_d_ff: int = 0  # MoE: a shared expert of this width that every token uses (0: none)
    shared_gate: bool = False  # Qwen2-MoE: sigmoid(x g) scales the shared expert, g d_model x 1
    router_scales: bool = False  # Gemma 4: router input scaled per channel, weights per expert
    # Ergo: each routed expert's output and the shared expert's go through an RMSNorm of d_model
    # of their own (counted with the layer's norms; a routed expert's norm active with it).
    expert_norm: bool = False
    # Zero (identity) experts beside the routed ones (LongCat-Flash): the router scores
    # experts + zero_experts; a top-k choice of one costs nothing, so the active count is a range.
    zero_experts: int = 0
    down_bias: bool | None = None  # a bias on W2 alone when it differs from ``bias`` (GTE)
    groups: int = 1  # W1 (W, V) and W2 as grouped 1x1 convolutions (SqueezeBERT): / groups
    stack: int = 1  # FFNs one after another in each layer, each with its norm (MobileBERT)
    adapters: int = 0  # X-MOD: one bottleneck adapter per language after the FFN, each
    adapter_d_ff: int = 0  # d_model -> adapter_d_ff -> d_model with biases
    # issue 40, hybrids: RWKV's channel mixing, sigmoid(x R) scaling the output (R d_model x
    # d_model) and two token-shift mixing vectors of d_model; config readers only
    channel_mix: bool = False
    # issue 40, hybrids: Inkling's router also scores the shared experts (shared_d_ff / d_ff of
    # them) and keeps one learned scale; config readers only
    router_shared: bool = False

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def label(self) -> str:
        """The activation as people name it: ``relu``, ``swiglu``, ``geglu (gelu_tanh)``."""
        if not self.gated:
            return self.activation
        for name, act in GLU_VARIANTS.items():
            if act == self.activation:
                return name
        if self.activation == "gelu_tanh":
            return "geglu (gelu_tanh)"
        return f"gated {self.activation}"


@dataclass(frozen=True)
class AttentionSpec:
    heads: int
    kv_heads: int | None = None  # grouped-query attention; None means heads
    head_dim: int | None = None  # None means d_model // heads
    qkv_bias: bool = True
    out_bias: bool = True
    relative_buckets: int = 0  # T5: a (buckets x heads) bias table in each stack's first layer
    relative_per_layer: bool = False  # UMT5: such a table in every layer, not only the first
    # Norms on queries and keys: "head" one norm of head_dim shared by all heads (Qwen3, Gemma3,
    # Phi), "heads" one weight per head and channel (heads x head_dim for Q, kv_heads x head_dim
    # for K: OLMo2, Cohere, StableLM). Counted with the layer's norms.
    qk_norm: str = "none"
    qk_norm_bias: bool = False
    # Multi-head latent attention (DeepSeek-V2/V3), when kv_lora_rank > 0: K and V come from a
    # shared latent of kv_lora_rank plus one rope_head_dim key; head_dim is the query/key width
    # of a head (nope + rope), v_head_dim the value width; q_lora_rank > 0 factors W_Q as well.
    # Without a latent, v_head_dim narrows V and the output projection's input (MiMo-V2-Flash).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int | None = None
    sinks: bool = False  # one learned logit per head that takes part in the softmax (gpt-oss)
    values_are_keys: bool = False  # no W_V: K's projection is also V (Gemma 4's full layers)
    differential: bool = False  # DiffLlama: four learned vectors of head_dim (its lambdas)
    dynamic_mask: bool = False  # Doge: dt_proj (kv_heads x head_dim -> kv_heads) and A per KV head
    # a sigmoid gate on each head's output: W_Q gives it too (Qwen3-Next); under latent attention
    # a projection of its own from x, heads x v_head_dim (HY-V4)
    output_gate: bool = False
    # DeepSeek-V3.2's lightning indexer beside latent attention (index_heads > 0): queries of
    # index_heads x index_head_dim from the query latent, one key of index_head_dim (LayerNorm
    # with bias) and a weight per head from x; it caches its key per token.
    index_heads: int = 0
    index_head_dim: int = 0
    # a gate per head from x, d_model x heads: sigmoid (dots.llm3, latent; LFM3) or softplus
    # (Laguna)
    head_gate: bool = False
    gate_bias: bool = False  # a bias per head on the output gate (Beam)
    rope_key_norm: bool = False  # latent attention: an RMSNorm on the rope key (dots.llm3)
    # latent attention: W_Q_b reads twice q_lora_rank and also gives a sigmoid gate of
    # v_head_dim per head on the output (A.X-K2's q_gate_proj)
    query_gate: bool = False
    key_bias: bool = True  # with qkv_bias: False when W_K alone has none (DeBERTa v1)
    query_bias: bool = True  # with qkv_bias: False when W_Q alone has none (Funnel)
    # Transformer-XL's relative attention (Funnel): a d_model x heads x head_dim position
    # kernel, per-head r_w, r_r and r_s biases and two segment embeddings, in every layer.
    xl_relative: bool = False
    # More d_model -> heads x head_dim projections, with qkv_bias, in every layer: Longformer's
    # and LED's global Q, K and V (3), LUKE's entity-aware queries (3).
    extra_projections: int = 0
    # ConvBERT: a span-based dynamic convolution of this kernel beside attention (its own
    # projections, and the second half of W_O's input); 0: none.
    span_conv: int = 0
    # ProphetNet's decoder: a d_model -> relative_projection (buckets x heads) projection with a
    # bias in each layer's self-attention; 0: none.
    relative_projection: int = 0
    value_conv: int = 0  # Nystromformer: a depthwise convolution of this kernel on each head's V
    qkv_groups: int = 1  # W_Q, W_K, W_V as grouped 1x1 convolutions (SqueezeBERT): / groups
    shared_qk: bool = False  # one projection for queries and keys, no W_K (Reformer's LSH)
    out_groups: int = 1  # W_O likewise


# A decoder layer's token mixer: full causal attention; attention over a sliding window of
# ``window`` tokens (Mistral, Gemma 2/3, gpt-oss); over chunks of ``window`` tokens (Llama 4);
# a linear-attention or state-space block with a fixed state instead of a KV cache (Gated
# DeltaNet, Mamba: ``LayerKind.mixer_spec``); none at all.
MIXERS = ("full", "sliding", "chunked", "linear", "mamba", "conv", "none")


@dataclass(frozen=True)
class LinearMixerSpec:
    """A token mixer other than softmax attention, with a fixed state per sequence.

    ``gated_deltanet`` (Qwen3-Next): Q and K of ``k_heads`` x ``k_head_dim``, V and the output
    gate of ``v_heads`` x ``v_head_dim``, the per-head beta and alpha, a depthwise causal
    convolution of ``conv_kernel`` over Q, K and V, per-head ``A_log`` and ``dt_bias``, an
    RMSNorm of ``v_head_dim`` on the output, and the output projection."""

    kind: str  # "gated_deltanet", or "lightning" (MiniMax-Text-01: counting/model.py's
    # lightning_matrices; k and v heads alike, no convolution)
    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int = 4


@dataclass(frozen=True)
class MambaMixerSpec:
    """A Mamba (selective state-space) mixer: x -> d_inner twice (the SSM input and its gate),
    a depthwise causal convolution of conv_kernel, x_proj to the time-step rank and the input-
    dependent B and C (d_state each), dt_proj back to d_inner, per-channel A (d_state) and D,
    the output projection. ``bc_dt_norms``: RMSNorms on the time step, B and C (Jamba)."""

    d_inner: int
    d_state: int
    dt_rank: int
    conv_kernel: int = 4
    conv_bias: bool = True
    proj_bias: bool = False
    bc_dt_norms: bool = False


@dataclass(frozen=True)
class Mamba2MixerSpec:
    """A Mamba-2 mixer: one projection to the gate (d_inner), the convolved stream (d_inner and
    B and C, groups x d_state each) and one time step per head; a depthwise convolution of
    conv_kernel over the convolved stream; per-head dt_bias, A_log and D; a gated RMSNorm of
    d_inner; the output projection."""

    d_inner: int
    d_state: int
    heads: int
    groups: int = 1
    conv_kernel: int = 4
    conv_bias: bool = True
    proj_bias: bool = False
    norm: bool = True  # issue 40, hybrids: False, no gated norm (Falcon-H1's mamba_rms_norm)


# --- issue 40, hybrids: LFM's short convolution, Zamba's shared transformer block ------------


@dataclass(frozen=True)
class ShortConvSpec:
    """LFM2's and LFM3's short convolution (mixer ``conv``): x -> B, C and x (3 x width), a
    depthwise causal convolution of ``kernel`` over B * x, C times it, the output projection;
    its state the convolution's last ``kernel`` inputs."""

    width: int
    kernel: int
    bias: bool = False


@dataclass(frozen=True)
class SideConvSpec:
    """Inkling's parts beside a layer's attention (a mixer_spec on an attention layer): short
    depthwise convolutions without bias of ``kernel`` taps on K and V (kv_width channels each)
    and on the stream before attention and before the FFN (``width``: d_model, each); the
    relative-position logits, r_proj (d_model -> heads x rel_dim) and a table of rel_dim x
    rel_extent. Its state: each convolution's last ``kernel`` inputs."""

    kv_width: int
    width: int
    kernel: int
    heads: int
    rel_dim: int
    rel_extent: int


@dataclass(frozen=True)
class SharedBlockSpec:
    """Zamba's and Zamba2's shared transformer block, as one layer uses it: an attention (the
    layer kind's ``attention``) reading ``input_width`` channels (the stream and the input
    embeddings side by side: 2 d_model) back to d_model, the kind's FFN, a norm of
    input_width and one of d_model; its weights are held by the first layer using it
    (``owner``), the others reuse them (their cache and FLOPs their own). Each layer adds a
    d_model x d_model projection of its own; Zamba2's block also holds, for each of its
    ``users`` layers, LoRA adapters of ``adapter_rank`` on the FFN's gate and up (and on Q, K
    and V with ``attention_adapters``)."""

    owner: bool
    input_width: int
    users: int = 1
    adapter_rank: int = 0
    attention_adapters: bool = False


@dataclass(frozen=True)
class LayerKind:
    """One kind of decoder layer, as data: its token mixer and its FFN. ``ModelSpec.pattern``
    lists the kind of every decoder layer in order; layers of equal kinds are counted
    together, under ``name``."""

    name: str = "decoder"  # what ``params`` calls these layers
    mixer: str = "full"  # one of MIXERS
    window: int = 0  # sliding: the window; chunked: the chunk (tokens)
    attention: AttentionSpec | None = None  # None: the spec's attention
    mixer_spec: (LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec | ShortConvSpec
                 | SideConvSpec | None) = None
    ffn: FfnSpec | None = None  # None: the spec's FFN
    has_ffn: bool = True  # False: no FFN in these layers (a mixer-only layer)
    shares_kv: bool = False  # reads another layer's KV cache and keeps none (Gemma 3n)
    attentions: int = 1  # attention sublayers in each layer, each its own KV (LongCat-Flash: 2)
    norms: int | None = None  # norms of d_model in each layer (None: the spec's norm.per_layer)
    gated_norms: int = 0  # of those, how many gate their output by x -> norm_gate_rank -> x
    norm_gate_rank: int = 0  # (A.X-K2's GatedRMSNorm: two bias-free projections, d x rank x d)
    shared: SharedBlockSpec | None = None  # issue 40, hybrids: Zamba's shared block, beside mixer


@dataclass(frozen=True)
class LayerExtrasSpec:
    """Gemma 3n's parts beside attention and FFN. Per layer: AltUp over ``altup_inputs``
    copies of the stream (coefficients, a router and its norm, an output scale), a LAuReL
    low-rank residual of ``laurel_rank`` and its norm, the per-layer input's gate and projection
    of ``per_layer_width`` and its norm. Per model: a per-layer embedding table
    (``per_layer_vocab`` x layers x per_layer_width), the projection of the stream to those
    inputs and its norm, and the AltUp projections in and out."""

    altup_inputs: int
    laurel_rank: int
    per_layer_width: int
    per_layer_vocab: int


@dataclass(frozen=True)
class LatentSpec:
    """Perceiver: ``latents`` learned rows of d_model attend once to the inputs (``inputs``
    wide) before the self-attention layers: queries ``qk`` wide from the latents, keys ``qk``
    and values ``v`` wide from the inputs, the output back to d_model (all with biases), a
    LayerNorm on each side, then an MLP of ``widening`` x d_model and its LayerNorm."""

    latents: int
    inputs: int
    qk: int
    v: int
    widening: int = 1


@dataclass(frozen=True)
class BottleneckSpec:
    """MobileBERT: the stream between layers is ``outer`` wide, each layer's attention and FFNs
    d_model (true_hidden_size) wide inside it: a projection in (outer -> d_model, with bias and
    a norm), another for the queries and keys when ``shared_qk``, the values read from the
    outer stream when ``value_outer``, a projection out (d_model -> outer, with bias and a
    norm). Its embeddings are outer wide: word vectors ``embedding`` wide (joined with their two
    neighbours' when ``trigram``) projected with a bias, position and token-type tables, a
    norm; the pooler's dense layer with ``pooler``."""

    outer: int
    shared_qk: bool
    value_outer: bool
    vocab: int
    embedding: int
    trigram: bool
    positions: int
    token_types: int
    pooler: bool


@dataclass(frozen=True)
class NormSpec:
    kind: NormKind = "layernorm"
    bias: bool = True
    per_layer: int = 2  # norms in an encoder or decoder-only layer; cross-attention adds one
    final: bool = True  # one norm after the last layer of each stack
    affine: bool = True  # False: the norms have no weights (OLMo; OPT without elementwise affine)
    sub_norms: bool = False  # BitNet: norms on attention's output (d_model) and the FFN's hidden
    residual_scales: bool = False  # Doge: a learned scale (d_model) on each of the 2 residuals
    cross: int = 1  # norms a decoder layer's cross-attention adds (T5Gemma: 2, before and after)
    final_bias: bool | None = None  # the final norm's bias when it differs from ``bias`` (ESM C)
    final_width: int = 0  # the final norm's width when not d_model's (Reformer: 2 x d_model)


@dataclass(frozen=True)
class LayersSpec:
    encoder: int = 0
    decoder: int = 1  # with encoder > 0, decoder layers also have cross-attention
    dense: int = 0  # decoder layers whose FFN is ModelSpec.dense_ffn, not the MoE ffn (DeepSeek)
    shared: int = 0  # ALBERT: the encoder's distinct layers, each run encoder / shared times
    cross: bool = False  # decoder layers attend to an encoder outside the model (TrOCR)
    merged_cross: bool = False  # the decoder attends to the encoder with its self-attention's
    # projections (T5Gemma 2's merged attention): no cross-attention weights of its own


@dataclass(frozen=True)
class EmbeddingsSpec:
    vocab: int
    dim: int | None = None  # word-embedding width when it differs from d_model (OPT-350m)
    positions: int = 0  # learned position rows (0: sinusoidal or rotary, no parameters)
    position_offset: int = 0  # extra learned rows (OPT keeps 2)
    token_types: int = 0
    norm: bool = False  # a norm right after the embeddings (BERT)
    head: HeadKind = "tied"  # output projection to the vocabulary
    head_bias: bool = False
    # ELECTRA: word, position and token-type tables and their norm are all dim wide, then one
    # dim -> d_model projection with a bias (instead of OPT's bias-free project in and out).
    factorized: bool = False
    per_stack: bool = False  # BART: each stack of an encoder-decoder its own positions and norm
    relative: int = 0  # DeBERTa: rows of a relative-position table (d_model wide), all layers'
    relative_norm: bool = False  # DeBERTa-v3: a norm on that table (with relative > 0)
    mask: bool = False  # XLNet: one learned d_model vector for the positions to predict
    position_dim: int = 0  # the position table's width when not d_model's (RoFormer: head_dim)
    decoder_positions: int = 0  # with per_stack: the decoder's rows when not the encoder's (LED)
    decoder_vocab: int = 0  # the decoder's own word table (and the head), when it has one (FSMT)
    project: bool = False  # a d_model -> d_model projection with bias after the norm (FNet)
    extra_rows: int = 0  # more d_model rows: PEGASUS-X's global tokens, ProphetNet's n-grams
    head_transform: bool = False  # BERT's LM head: a d_model dense with bias and a norm first
    head_transform_bias: bool = True  # that dense layer's bias (ModernBERT-decoder: none)
    # Reformer's axial positions: one table (rows, width) per axis, the widths summing to
    # d_model.
    axial: tuple[tuple[int, int], ...] = ()
    # More tables (rows, width) whose vectors are joined to the word vector, all then projected
    # to d_model with a bias (RoCBert's shape and pronunciation tables).
    side_tables: tuple[tuple[int, int], ...] = ()
    # LUKE's entities: a table of entities x entity_dim (projected to d_model without bias when
    # narrower), their own position and token-type tables and norm.
    entities: int = 0
    entity_dim: int = 0


@dataclass(frozen=True)
class InitSpec:
    """Random weights: numpy.random.default_rng(seed).normal(0, std), biases zero."""

    std: float = 0.02
    seed: int = 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    d_model: int
    ffn: FfnSpec
    family: str = "custom"
    description: str = ""
    attention: AttentionSpec | None = None
    norm: NormSpec | None = None
    layers: LayersSpec = field(default_factory=LayersSpec)
    embeddings: EmbeddingsSpec | None = None
    pooler: bool = False
    seq_len: int = 1024
    dense_ffn: FfnSpec | None = None  # the FFN of the layers.dense layers of a MoE model
    init: InitSpec = field(default_factory=InitSpec)
    # Per-layer heterogeneity (issue 40): the kind of each decoder layer, in order; empty, the
    # layers.dense first layers with dense_ffn, then the others with ffn. Not a preset key yet.
    pattern: tuple[LayerKind, ...] = ()
    # What a multimodal config holds that is not counted (its vision or audio tower): the count
    # is the language model's alone, and says so.
    uncounted: tuple[str, ...] = ()
    extras: LayerExtrasSpec | None = None  # Gemma 3n's AltUp, LAuReL and per-layer inputs
    hyper_streams: int = 0  # hyper-connections over this many copies of the stream (HY-V4)
    encoder_pattern: tuple[LayerKind, ...] = ()  # the kind of each encoder layer (as pattern)
    latents: LatentSpec | None = None  # Perceiver's latent array and its cross-attention
    bottleneck: BottleneckSpec | None = None  # MobileBERT's bottlenecks and embeddings

    @property
    def ffn_only(self) -> bool:
        return self.attention is None and self.embeddings is None and self.norm is None

    @property
    def d_ff(self) -> int:
        return self.ffn.d_ff

    def decoder_kinds(self) -> tuple[LayerKind, ...]:
        """The kind of each decoder layer: the pattern, else layers.dense dense layers (their
        FFN dense_ffn) then the others."""
        if self.pattern:
            return self.pattern
        dense = self.layers.dense if self.dense_ffn is not None else 0
        return ((LayerKind("dense decoder", ffn=self.dense_ffn),) * dense
                + (LayerKind(),) * (self.layers.decoder - dense))


# ---------------------------------------------------------------------------------------------
# Validation: one place, one message format ("<source>: <key>: expected ..., got ...").

_SECTIONS: dict[str, type] = {
    "ffn": FfnSpec,
    "attention": AttentionSpec,
    "norm": NormSpec,
    "layers": LayersSpec,
    "embeddings": EmbeddingsSpec,
    "init": InitSpec,
    "dense_ffn": FfnSpec,
}

_CHOICES: dict[str, tuple[str, ...]] = {
    "ffn.activation": ACTIVATIONS,
    "norm.kind": ("layernorm", "rmsnorm"),
    "embeddings.head": ("tied", "untied", "none"),
    "attention.qk_norm": ("none", "head", "heads"),
}

_MINIMUM: dict[str, int] = {  # keys whose integers may be 0; every other integer must be >= 1
    "attention.relative_buckets": 0,
    "embeddings.relative": 0,
    "norm.per_layer": 0,
    "layers.encoder": 0,
    "layers.decoder": 0,
    "embeddings.positions": 0,
    "embeddings.position_offset": 0,
    "embeddings.token_types": 0,
    "init.seed": 0,
    "ffn.shared_d_ff": 0,
    "dense_ffn.shared_d_ff": 0,
    "attention.kv_lora_rank": 0,
    "attention.q_lora_rank": 0,
    "attention.rope_head_dim": 0,
    "attention.index_heads": 0,
    "attention.index_head_dim": 0,
    "ffn.zero_experts": 0,
    "dense_ffn.zero_experts": 0,
    "layers.dense": 0,
}


# Issue 40's encoder and seq2seq parts (each a field of one section), which only the config
# readers fill: not keys of a YAML spec.
ENCODER_PARTS = frozenset({
    "down_bias", "groups", "stack", "adapters", "adapter_d_ff",
    "key_bias", "query_bias", "xl_relative", "extra_projections", "span_conv",
    "relative_projection", "value_conv", "qkv_groups", "out_groups", "shared_qk",
    "shared", "cross", "merged_cross",
    "position_dim", "decoder_positions", "decoder_vocab", "project", "extra_rows",
    "head_transform", "axial", "side_tables", "entities", "entity_dim",
    "final_bias", "final_width",
})

# Spec fields only the config readers fill (per-layer kinds, what a config leaves uncounted).
NOT_PRESET_KEYS = frozenset({"pattern", "uncounted", "extras", "hyper_streams",
                             "encoder_pattern", "latents", "bottleneck", "channel_mix",
                             "router_shared", "head_transform_bias"}) | ENCODER_PARTS


def _check_value(source: str, key: str, value: Any, annotation: str) -> Any:
    """One key's value, checked by ``validate`` (never coerced)."""
    where = f"{source}: key '{key}'"
    if value is None:
        if "None" in annotation:
            return None
        raise validate.fail(where, _describe(key, annotation), value, SpecError)
    if annotation.startswith("bool"):
        return validate.flag(where, value, SpecError)
    if annotation.startswith("int"):
        return validate.whole(where, value, _MINIMUM.get(key, 1), error=SpecError)
    if annotation.startswith("float"):
        return validate.number(where, value, positive=True, error=SpecError)
    return validate.name(where, value, _CHOICES.get(key), SpecError)


def _describe(key: str, annotation: str) -> str:
    if annotation.startswith("int"):
        return "a whole number >= 0" if _MINIMUM.get(key, 1) == 0 else "a whole number >= 1"
    return "a value"


def _build(source: str, prefix: str, cls: type, data: Any) -> Any:
    where = prefix.rstrip(".") or "top level"
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: '{where}' must be a mapping of keys to values, got "
                        f"{validate.brief(data)}")
    allowed = {f.name: f for f in fields(cls) if f.name not in NOT_PRESET_KEYS}
    for key in data:
        if key not in allowed:
            raise SpecError(
                f"{source}: unknown key '{prefix}{shown(key)}'"
                f"{suggest(str(key), list(allowed))}; "
                f"allowed keys: {', '.join(allowed)}"
            )
    values: dict[str, Any] = {}
    for name, f in allowed.items():
        if name not in data:
            no_default = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            if no_default:
                raise SpecError(f"{source}: missing key '{prefix}{name}'")
            continue
        if not prefix and name in _SECTIONS:
            if data[name] is None and "None" in str(f.type):
                values[name] = None
            else:
                values[name] = _build(source, f"{prefix}{name}.", _SECTIONS[name], data[name])
        else:
            values[name] = _check_value(source, f"{prefix}{name}", data[name], str(f.type))
    return cls(**values)


def check_spec(spec: ModelSpec, source: str) -> ModelSpec:
    """Cross-field rules a single key cannot express. Returns the spec unchanged."""
    ffn = spec.ffn
    if ffn.top_k > ffn.experts:
        raise SpecError(
            f"{source}: key 'ffn.top_k': expected at most ffn.experts ({ffn.experts}), "
            f"got {ffn.top_k}"
        )
    if ffn.capacity_factor is not None and not ffn.is_moe:
        raise SpecError(f"{source}: key 'ffn.capacity_factor': only a mixture of experts "
                        "(ffn.experts > 1) has a capacity")
    att = spec.attention
    if att is not None:
        kv = att.kv_heads or att.heads
        if att.heads % kv:
            raise SpecError(
                f"{source}: key 'attention.kv_heads': expected a divisor of attention.heads "
                f"({att.heads}), got {kv}"
            )
        if att.head_dim is None and spec.d_model % att.heads:
            raise SpecError(
                f"{source}: key 'attention.heads': d_model {spec.d_model} is not divisible by "
                f"{att.heads} heads; give attention.head_dim"
            )
    if spec.layers.encoder == 0 and spec.layers.decoder == 0:
        raise SpecError(f"{source}: key 'layers': expected at least one encoder or decoder layer")
    _validate_additions(spec, source)
    return spec


def _validate_additions(spec: ModelSpec, source: str) -> None:
    """Rules of the keys added for issue 12: shared experts, dense layers, latent attention."""
    for key, ffn in (("ffn", spec.ffn), ("dense_ffn", spec.dense_ffn)):
        if ffn is not None and (ffn.shared_d_ff or ffn.shared_gate) and not ffn.is_moe:
            raise SpecError(f"{source}: key '{key}.shared_d_ff': only a mixture of experts "
                            f"({key}.experts > 1) has a shared expert")
        if ffn is not None and ffn.expert_norm and not ffn.is_moe:
            raise SpecError(f"{source}: key '{key}.expert_norm': only a mixture of experts "
                            f"({key}.experts > 1) has expert norms")
        if ffn is not None and ffn.shared_gate and not ffn.shared_d_ff:
            raise SpecError(f"{source}: key '{key}.shared_gate': needs a shared expert "
                            f"({key}.shared_d_ff > 0)")
        if ffn is not None and ffn.router_scales and not ffn.is_moe:
            raise SpecError(f"{source}: key '{key}.router_scales': only a mixture of experts "
                            f"({key}.experts > 1) has a router")
    layers = spec.layers
    if layers.dense > layers.decoder:
        raise SpecError(f"{source}: key 'layers.dense': expected at most layers.decoder "
                        f"({layers.decoder}), got {layers.dense}")
    if spec.pattern and len(spec.pattern) != layers.decoder:
        raise SpecError(f"{source}: the layer pattern names {len(spec.pattern)} layers, "
                        f"layers.decoder is {layers.decoder}")
    if layers.shared and layers.encoder % layers.shared:
        raise SpecError(f"{source}: key 'layers.shared': expected a divisor of layers.encoder "
                        f"({layers.encoder}), got {layers.shared}")
    if spec.encoder_pattern and len(spec.encoder_pattern) != layers.encoder:
        raise SpecError(f"{source}: the encoder's layer pattern names "
                        f"{len(spec.encoder_pattern)} layers, layers.encoder is {layers.encoder}")
    if layers.dense and spec.dense_ffn is None:
        raise SpecError(f"{source}: key 'dense_ffn': layers.dense ({layers.dense}) needs the "
                        "dense layers' FFN")
    att = spec.attention
    if att is not None and att.gate_bias and not (att.output_gate or att.head_gate):
        raise SpecError(f"{source}: key 'attention.gate_bias': needs an output gate "
                        "(attention.output_gate or attention.head_gate)")
    if att is not None and att.kv_lora_rank:
        if att.head_dim is None or att.rope_head_dim >= att.head_dim:
            raise SpecError(f"{source}: key 'attention.rope_head_dim': latent attention needs "
                            "attention.head_dim (nope + rope) larger than rope_head_dim")
        for key in ("kv_lora_rank", "q_lora_rank"):
            rank = getattr(att, key)
            if rank > spec.d_model:
                raise SpecError(f"{source}: key 'attention.{key}': expected at most d_model "
                                f"({spec.d_model}), got {rank}")
    elif att is not None and (att.q_lora_rank or att.rope_head_dim):
        raise SpecError(f"{source}: key 'attention.kv_lora_rank': q_lora_rank and "
                        "rope_head_dim belong to latent attention (kv_lora_rank > 0)")
    if att is not None and (att.index_heads or att.index_head_dim) and not (
            att.index_heads and att.index_head_dim and att.q_lora_rank and att.kv_lora_rank):
        raise SpecError(f"{source}: key 'attention.index_heads': the indexer needs latent "
                        "attention with q_lora_rank, and index_heads and index_head_dim, all > 0")
    for key in ("rope_key_norm", "query_gate"):  # head_gate: any attention (LFM3's too)
        if att is not None and getattr(att, key) and not (
                att.kv_lora_rank and (att.q_lora_rank or key != "query_gate")):
            raise SpecError(f"{source}: key 'attention.{key}': belongs to latent attention "
                            "(kv_lora_rank > 0; query_gate with q_lora_rank > 0)")


def spec_from_mapping(data: Any, source: str, default_name: str = "custom") -> ModelSpec:
    """Build and validate a spec from parsed YAML (or any mapping)."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: expected a mapping of keys to values, got "
                        f"{type(data).__name__}")
    if "name" not in data:
        data = {**data, "name": default_name}
    spec = _build(source, "", ModelSpec, data)
    return check_spec(spec, source)


# ---------------------------------------------------------------------------------------------
# Presets: built-in names or YAML files.


def _preset_folder() -> Path:
    """The folder of the built-in YAML files: the package ``ffncli.presets`` of an install
    (setuptools maps the top-level presets/ to it), else, when ``ffncli`` is the source tree
    itself (run from the clone's root, where it shadows the install), the clone's presets/."""
    source = Path(__file__).resolve().parents[2] / "presets"
    try:  # by name: mypy cannot find a package that only the install maps
        presets = importlib.import_module("ffncli.presets")
    except ModuleNotFoundError:
        return source
    return Path(presets.__file__).parent if presets.__file__ is not None else source


def preset_names() -> list[str]:
    return sorted(p.stem for p in _preset_folder().glob("*.yaml"))


def _parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load``'s types, but strict: duplicate keys, aliases that expand past
    10,000 values and nesting past 64 levels are one-line errors (see ffncli.base.textformats)."""
    from ffncli.base.textformats import Malformed, parse_yaml

    try:
        return parse_yaml(text)
    except Malformed as exc:
        raise SpecError(f"{source}: invalid YAML{exc.where}: {exc.problem}") from None


def load_preset(name_or_path: str) -> ModelSpec:
    """A built-in preset by name, or a YAML file by path."""
    looks_like_path = name_or_path.endswith((".yaml", ".yml", ".json")) or "/" in name_or_path
    if not looks_like_path:
        names = preset_names()
        if name_or_path not in names:
            raise SpecError(
                f"unknown preset '{name_or_path}'{suggest(name_or_path, names)}; "
                f"built-in presets: {', '.join(names)}"
            )
        path = _preset_folder() / f"{name_or_path}.yaml"
        source = f"preset {name_or_path}"
        default_name = name_or_path
    else:
        path = Path(name_or_path)
        source = str(path)
        default_name = path.stem
    from ffncli.base.textformats import read_text

    text = read_text(path, "preset file", SpecError)
    data = _parse_yaml(text, source)
    hf_keys = [k for k in ("model_type", "architectures") if isinstance(data, dict) and k in data]
    if hf_keys:  # a Hugging Face config.json given as a preset
        raise SpecError(f"{source}: a Hugging Face config (it has '{hf_keys[0]}'), not a spec: "
                        f"give it with --config {name_or_path}")
    return spec_from_mapping(data, source, default_name)


# ---------------------------------------------------------------------------------------------
# What-if overrides, shared by every command.


@dataclass(frozen=True)
class Overrides:
    d_model: int | None = None
    d_ff: int | None = None
    activation: str | None = None  # a plain activation keeps the gating; a GLU name sets it
    gated: bool | None = None
    experts: int | None = None
    top_k: int | None = None
    capacity_factor: float | None = None
    beta: float | None = None
    match_params: bool = False
    multiple_of: int = 1
    seq_len: int | None = None  # attention-score FLOPs (params)


def match_gated_d_ff(d_model: int, d_ff: int, bias: bool, multiple_of: int = 1) -> int:
    """The gated FFN width with (about) the parameters of a two-matrix FFN of width ``d_ff``.

    Two matrices: 2 d f (+ f + d biases). Three: 3 d g (+ 2 g + d). Solving for g gives the
    seeds' 2/3 rule, g = 2 f / 3 without biases and f (2d + 1) / (3d + 2) with them. The result
    is rounded to the nearest integer (halves up); with ``multiple_of`` > 1 it is then rounded
    up to a multiple of it, as LLaMA does (16384 * 2/3 -> 11008 with multiple_of 256).
    """
    numerator = d_ff * (2 * d_model + 1) if bias else 2 * d_ff
    denominator = 3 * d_model + 2 if bias else 3
    g = (2 * numerator + denominator) // (2 * denominator)  # round half up, exact integers
    if multiple_of > 1:
        g = -(-g // multiple_of) * multiple_of
    return max(g, 1)


def apply_overrides(spec: ModelSpec, ov: Overrides) -> ModelSpec:
    """A new spec with the what-if values applied, validated again."""
    ffn = spec.ffn
    changes: dict[str, Any] = {}
    if ov.activation is not None:
        if ov.activation in GLU_VARIANTS:
            changes.update(activation=GLU_VARIANTS[ov.activation], gated=True)
        elif ov.activation in ACTIVATIONS:
            changes["activation"] = ov.activation
        else:
            validate.name("option --activation", ov.activation,
                          ACTIVATIONS + tuple(GLU_VARIANTS), SpecError)
    if ov.gated is not None:
        changes["gated"] = ov.gated
    for key in ("d_ff", "experts", "top_k"):
        value = getattr(ov, key)
        if value is not None:
            changes[key] = validate.whole(_option(key), value, error=SpecError)
    for key in ("beta", "capacity_factor"):
        value = getattr(ov, key)
        if value is not None:
            changes[key] = validate.number(_option(key), value, positive=True, error=SpecError)
    if ov.experts is not None and ov.top_k is None and ffn.top_k > ov.experts:
        changes["top_k"] = ov.experts
    new_ffn = replace(ffn, **changes)
    d_model = spec.d_model
    if ov.d_model is not None:
        d_model = validate.whole(_option("d_model"), ov.d_model, error=SpecError)
    validate.whole(_option("multiple_of"), ov.multiple_of, error=SpecError)
    seq_len = spec.seq_len
    if ov.seq_len is not None:
        seq_len = validate.whole(_option("seq_len"), ov.seq_len, error=SpecError)
    if ov.match_params:
        if not new_ffn.gated:
            raise SpecError(
                "option --match-params: needs a gated FFN; add --activation swiglu (or geglu, "
                "reglu, glu, bilinear) or --gated"
            )
        new_ffn = replace(
            new_ffn, d_ff=match_gated_d_ff(d_model, new_ffn.d_ff, new_ffn.bias, ov.multiple_of)
        )
    attention = spec.attention
    if attention is not None and ov.d_model is not None and attention.head_dim is None:
        if d_model % attention.heads:
            raise SpecError(
                f"option --d-model: {d_model} is not divisible by the {attention.heads} "
                "attention heads"
            )
    new = replace(spec, d_model=d_model, ffn=new_ffn, seq_len=seq_len)
    return check_spec(new, "overrides")


def _option(key: str) -> str:
    return f"option --{key.replace('_', '-')}"
