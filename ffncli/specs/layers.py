"""The parts of a decoder layer that only config readers build (never a preset): token mixers
other than attention, with a fixed state per sequence instead of a KV cache (linear attention,
Mamba, Mamba-2: ``LayerKind.mixer_spec``), Gemma 3n's extras (``ModelSpec.extras``),
Perceiver's latent array and MobileBERT's bottlenecks (``ModelSpec.latents``, ``bottleneck``).

A module of their own so that a preset's count does not define them: ``params --preset``
imports :mod:`ffncli.specs.spec` only (tests/test_startup.py pins the set). No NumPy here.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    # issue 40 (Inkling 2): K's and V's taps also projected from x per token, one
    # set for each of dynamic_heads KV heads (0: static taps alone); learned scales on Q
    # (query_scale wide: heads x head_dim) and on the relative states (rel_scale: heads x
    # rel_dim); a sink logit per head projected from x (sink_projection); the layer's inputs
    # as attention over the earlier blocks, residual_queries learned queries of d_model; in a
    # loop's layers message_gates gates of gate_rank mixing in the previous pass.
    dynamic_heads: int = 0
    query_scale: int = 0
    rel_scale: bool = False
    sink_projection: bool = False
    residual_queries: int = 0
    message_gates: int = 0
    gate_rank: int = 0


@dataclass(frozen=True)
class CcaSpec:
    """ZAYA's compressed convolutional attention, the parts beside its softmax attention (a
    mixer_spec on an attention layer; ZAYA): the queries and keys, (heads +
    kv_heads) x head_dim channels, convolved by a depthwise convolution of ``depthwise`` taps
    then a grouped one of ``grouped`` taps, one group a head, both with biases; a learned
    temperature per KV head on the keys. Its values are half the current token's, half the
    previous token's (v_proj_current and v_proj_delayed: the attention's W_V, split). Its
    state: the convolutions' last (depthwise - 1) + (grouped - 1) inputs and the previous
    token's delayed values (half of kv_heads x head_dim)."""

    heads: int
    kv_heads: int
    head_dim: int
    depthwise: int
    grouped: int


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
class LoopsSpec:
    """issue 40: decoder layers whose weights run several times a token
    (``LayerKind.runs``: Dory's recurrent section, run n_recurrent_loops times; HRM-Text's L and
    H stacks, run in cycles), each run with a KV cache layer of its own. ``cache_layers``: for
    each decoder layer, the cache layers of its runs, as transformers numbers them; ``states``:
    learned d_model vectors a loop starts from (HRM-Text's z_L_init)."""

    cache_layers: tuple[tuple[int, ...], ...]
    states: int = 0
# DeepSeek-V4
@dataclass(frozen=True)
class CompressorSpec:
    """DeepSeek-V4's KV compressor beside a layer's sliding-window attention (a mixer_spec on
    an attention layer): every ``rate`` tokens of the stream pooled into one entry of
    ``head_dim`` the queries also attend to. kv_proj and gate_proj (d_model -> series x
    head_dim each, no bias), a position bias (rate x series x head_dim), an RMSNorm of
    head_dim; ``series`` 2 when windows overlap (compressed sparse attention, CSA: each entry
    pools its window and the one before), 1 when they do not (heavily compressed, HCA). With
    ``index_heads`` (CSA) the lightning indexer, a compressor of its own at
    ``index_head_dim`` with queries from the query latent (q_lora_rank -> index_heads x
    index_head_dim) and a weight per head from x (d_model -> index_heads)."""

    rate: int
    head_dim: int
    series: int = 1
    index_heads: int = 0
    index_head_dim: int = 0
    q_lora_rank: int = 0
