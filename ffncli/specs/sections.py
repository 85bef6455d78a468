"""The sections of a spec, each a frozen dataclass: the FFN, the attention, the norms, the
layer stacks, the embeddings and the random weights' init. :mod:`ffncli.specs.spec` puts them
together (``ModelSpec``) and names them too. No NumPy here.
"""

from __future__ import annotations

from typing import Literal

from ffncli.base import record
from ffncli.specs.rules import GLU_VARIANTS

NormKind = Literal["layernorm", "rmsnorm"]
HeadKind = Literal["tied", "untied", "none"]


@record
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
    # issue 40: a bias of d_model on the experts' summed output (JetMoE); config
    # readers only
    output_bias: bool = False
    # issue 40: ZAYA's router, an MLP through router_mlp channels (d_model -> r with a
    # bias, an RMSNorm of r counted with the norms, r -> r twice with biases, r -> experts +
    # zero_experts without); router_states: a learned scale of r on the previous layer's
    # router state, added to its own (every layer but the first). Config readers only.
    router_mlp: int = 0
    router_states: bool = False
    # issue 40: a routed block even of one expert, its router scoring that one
    # (HunYuan-MoE's default num_experts 1); config readers only
    routed: bool = False
    # issue 40: learned vectors of d_ff scaling the hidden (Dory's suv_gate and suv_up:
    # 2); config readers only
    hidden_scales: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 1 or self.routed

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


@record
class AttentionSpec:
    """The attention of one layer: its heads, their widths and the parts beside them."""

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
    # Qwen4-Exp's QSA indexer beside grouped-query attention (qsa_heads > 0): one
    # projection from x to qsa_heads queries and one key of qsa_head_dim, an RMSNorm of
    # qsa_head_dim on the queries and one on the pooled keys; it caches its raw key per token.
    qsa_heads: int = 0
    qsa_head_dim: int = 0
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
    # issue 40: a mixture of attention heads (JetMoE's MoA), when head_experts > 0:
    # W_Q and W_O are head_experts banks of heads / head_top_k heads each, routed by a router
    # of their own (d_model x head_experts) with a bias of d_model on the summed output; K and
    # V are shared. A token uses head_top_k of the banks. Config readers only.
    head_experts: int = 0
    head_top_k: int = 0
    # issue 40: learned prompt tokens every layer's KV cache holds before the
    # sequence's (CPM-Ant's prompt_length); learned scalars in each layer beside attention
    # (NeoMME: an alpha per head and two residual lambdas). Config readers only.
    prompt_tokens: int = 0
    learned_scalars: int = 0
    # issue 40: DeepSeek-V4's grouped low-rank output projection (o_groups > 0): the
    # heads in o_groups groups, each group's heads x head_dim -> o_lora_rank (one block-diagonal
    # o_a_proj), then o_groups x o_lora_rank -> d_model (o_b_proj); with it a q_lora_rank
    # without a latent factors W_Q (q_a_proj, its norm, q_b_proj). Config readers only.
    o_groups: int = 0
    o_lora_rank: int = 0


@record
class NormSpec:
    """The norms: their kind, how many in each layer, and which have weights and biases."""

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
    # issue 40: ZAYA's affine residuals: at each of a layer's two residual additions a
    # scale and a bias of d_model on the branch and on the residual (8 d_model a layer), and a
    # scale and a bias on the embeddings' output (2 d_model). Config readers only.
    residual_affine: bool = False


@record
class LayersSpec:
    """The layer stacks: encoder and decoder layers, dense ones, shared ones."""

    encoder: int = 0
    decoder: int = 1  # with encoder > 0, decoder layers also have cross-attention
    dense: int = 0  # decoder layers whose FFN is ModelSpec.dense_ffn, not the MoE ffn (DeepSeek)
    shared: int = 0  # ALBERT: the encoder's distinct layers, each run encoder / shared times
    cross: bool = False  # decoder layers attend to an encoder outside the model (TrOCR)
    merged_cross: bool = False  # the decoder attends to the encoder with its self-attention's
    # projections (T5Gemma 2's merged attention): no cross-attention weights of its own


@record
class EmbeddingsSpec:
    """The tables before the first layer and the head after the last."""

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
    # issue 40 (NeoMME): with dim, one dim -> d_model projection in without bias and
    # none out (project_in_only); a table of value_dim a token beside the word table (value
    # embeddings); an image patch embedder of patch_dim inputs (a LayerNorm with bias,
    # patch_dim -> 2 d_model without bias, 2 d_model -> d_model with bias). Config readers only.
    project_in_only: bool = False
    value_dim: int = 0
    patch_dim: int = 0
    # issue 40: a learned scale per vocabulary entry on the head's logits (Dory's
    # logit_scale); config readers only
    head_scale: bool = False
    # MusicGen: that many word tables of vocab + 1 rows (the pad / start token beside
    # the codes), their vectors summed, and as many untied heads of vocab outputs, one a
    # codebook; 0: one table and one head. Config readers only.
    codebooks: int = 0
    # issue 40: the head's rows when fewer than the word table's (Inkling 2's
    # unpadded_vocab_size; 0: the word table's). Config readers only.
    head_vocab: int = 0


@record
class InitSpec:
    """Random weights: numpy.random.default_rng(seed).normal(0, std), biases zero."""

    std: float = 0.02
    seed: int = 0
