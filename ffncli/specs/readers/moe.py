"""Mixtures of experts of 2025-26 (issue 40), built from parts: a LLaMA-shaped decoder
(hfconfig's gated_decoder_spec) whose layers are each a mixture of SwiGLU experts or a dense
FFN, the routed experts with or without shared ones, its attention with the options the
architecture table names (norms on Q and K, a gate on each head's output, sinks, biases).

Each type's row in :data:`ffncli.specs.archs.ARCHS` calls :func:`moe_spec` with the keys and
defaults of its transformers 5.25 class."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ffncli.base.validate import MAX_INT
from ffncli.specs.hfconfig import (
    GEMMA2_NORM,
    Config,
    _dense_ffn,
    _experts,
    _kind_name,
    gated_decoder_spec,
    layer_mixers,
    with_pattern,
)
from ffncli.specs.layers import LinearMixerSpec, ShortConvSpec
from ffncli.specs.spec import AttentionSpec, FfnSpec, ModelSpec, NormSpec

_MLP_TYPES = ("sparse", "dense")


# Each class's layer_types when a config has none (transformers 5.25's __post_init__), as
# (layer index, layers, config) -> type: a config transformers wrote names them all.
_DEFAULT_LAYER_TYPES: dict[str, Callable[[int, int, Config], str]] = {
    "minimax": lambda i, n, c: "full_attention" if (i + 1) % 2 else "linear_attention",
    "exaone_moe": lambda i, n, c: "full_attention"
    if (i + 1) % c.int("sliding_window_pattern", 4) == 0 else "sliding_attention",
    "flint": lambda i, n, c: "full_attention"
    if i < 2 or i % 4 == 1 or i == n - 1 else "sliding_attention",
    "kolibri1": lambda i, n, c: "full_attention" if (i + 1) % 5 == 0 else "sliding_attention",
    "mimo_v2_flash": lambda i, n, c: "full_attention"
    if i == 0 or (i + 1) % 6 == 0 else "sliding_attention",
    "beam": lambda i, n, c: "full_attention"
    if (i + 1) % 6 == 0 or i == n - 1 else "sliding_attention",
    "ergo": lambda i, n, c: "full_attention"
    if (i + 1) % c.int("global_attention_every_n_layers", 4) == 0 else "sliding_attention",
    "dots1": lambda i, n, c: "sliding_attention"
    if c.data.get("sliding_window") is not None and i >= c.int0("max_window_layers")
    else "full_attention",
}


def with_layer_types(c: Config, family: str) -> Config:
    """The config, its layer_types filled in as the family's class fills them when absent."""
    rule = _DEFAULT_LAYER_TYPES.get(family)
    if rule is None or c.data.get("layer_types") is not None:
        return c
    n = c.int("num_hidden_layers")
    return Config({**c.data, "layer_types": [rule(i, n, c) for i in range(n)]}, c.source)


def mlp_kinds(c: Config, layers: int, first_key: str | None, first_default: int) -> list[bool]:
    """Whether each decoder layer is sparse: ``mlp_layer_types`` ("sparse", "dense") when the
    config has it, else the first ``first_key`` layers (``first_default`` without the key, or
    when the class reads no key) dense and the others sparse."""
    value = c.data.get("mlp_layer_types")
    if value is not None:
        if not isinstance(value, list) or len(value) != layers or not all(
                isinstance(v, str) and v in _MLP_TYPES for v in value):
            raise c.fail("mlp_layer_types", f"a list of {layers} layer types (sparse, dense)")
        return [v == "sparse" for v in value]
    first = c.int0(first_key, first_default) if first_key else first_default
    first = c.at_most(first_key or "mlp_layer_types", first, "num_hidden_layers", layers)
    return [i >= first for i in range(layers)]


def sparse_steps(c: Config, layers: int, only_default: tuple[int, ...] = ()) -> list[bool]:
    """Qwen-MoE's rule: layer i is sparse unless listed in ``mlp_only_layers``
    (``only_default`` when absent or null), and only when (i + 1) is a multiple of
    ``decoder_sparse_step``."""
    step = c.int("decoder_sparse_step", 1)
    only = set(c.ints("mlp_only_layers") if c.data.get("mlp_only_layers") is not None
               else only_default)
    return [i not in only and (i + 1) % step == 0 for i in range(layers)]


def routed_experts(c: Config, *, experts_key: str, d_ff_key: str = "moe_intermediate_size",
                   top_k_default: int | None = None, experts_default: int | None = None,
                   top_k_key: str = "num_experts_per_tok",
                   shared_count: tuple[str, int] | None = None, shared_width: str | None = None,
                   shared_gate: bool = False, router_bias: bool = False) -> FfnSpec:
    """The routed SwiGLU experts of ``d_ff_key``; a shared expert either ``shared_count``
    (key, default) experts of that width run as one FFN, or one of ``shared_width``;
    ``router_bias``: a score-correction bias that is a parameter (one per expert);
    ``top_k_key``: the key of top-k when the class names it otherwise (Aria's moe_topk)."""
    if top_k_key != "num_experts_per_tok":
        top_k_default = c.at_most(top_k_key, c.int(top_k_key, top_k_default), experts_key,
                                  c.int(experts_key, experts_default))
    shared = 0
    if shared_count is not None:
        shared = c.int0(shared_count[0], shared_count[1]) * c.int(d_ff_key)
    elif shared_width is not None:
        shared = c.int0(shared_width, 0)
    return _experts(c, experts_key, d_ff_key, top_k_default, experts_default,
                    router_bias=router_bias, shared_d_ff=shared,
                    shared_gate=shared_gate and shared > 0)


def moe_spec(c: Config, family: str, *, experts_key: str = "num_experts",
             d_ff_key: str = "moe_intermediate_size", top_k_default: int | None = None,
             experts_default: int | None = None, top_k_key: str = "num_experts_per_tok",
             shared_count: tuple[str, int] | None = None,
             shared_width: str | None = None, shared_gate: bool = False,
             router_bias: bool = False, first_key: str | None = "first_k_dense_replace",
             first_default: int = 0, only_layers: tuple[int, ...] | None = None,
             output_gate: bool = False, head_gate: bool = False, gate_bias: bool = False,
             sinks: str = "none", v_head_dim: int | None = None,
             sliding_kv_times: int = 1, dense_key: str = "intermediate_size",
             shares_kv: list[bool] | None = None, mixer_spec: LinearMixerSpec | None = None,
             shared_mlp_bias: bool = False, unbiased_gate: bool = False,
             **options: Any) -> ModelSpec:
    """A decoder whose layers mix tokens by ``layer_types`` and hold routed experts or a dense
    SwiGLU FFN of ``dense_key``: by ``mlp_layer_types`` / ``first_key`` (:func:`mlp_kinds`)
    or, with ``only_layers``, by Qwen-MoE's rule (:func:`sparse_steps`). ``options`` go to
    gated_decoder_spec (norms, Q/K norms, biases, head tying); ``output_gate``: W_Q also gives
    a sigmoid gate on each head's output, ``head_gate`` a d_model -> heads gate, ``gate_bias``
    a bias per head on either; ``sinks``: a learned sink logit per head in "all"
    layers or in the "sliding" ones; ``v_head_dim``: values v_head_dim wide (MiMo; the
    default when the config has no such key);
    ``sliding_kv_times``: sliding layers have that many times num_key_value_heads;
    ``shares_kv``: the layers that read another layer's K and V (none of their own);
    ``mixer_spec``: the linear-attention layers' mixer; ``shared_mlp_bias``: the shared expert
    takes mlp_bias (Aria, HY-V3) while the routed experts have none: refused when true;
    ``unbiased_gate``: the output gate has no bias whatever attention_bias says (Beam, Laguna),
    so attention_bias is refused with a gate as wide as Q (counted with W_Q)."""
    c = with_layer_types(c, family)
    experts = routed_experts(c, experts_key=experts_key, d_ff_key=d_ff_key,
                             top_k_default=top_k_default, experts_default=experts_default,
                             top_k_key=top_k_key, shared_count=shared_count,
                             shared_width=shared_width,
                             shared_gate=shared_gate, router_bias=router_bias)
    _refuse_biases(c, experts, shared_mlp_bias=shared_mlp_bias,
                   gate=unbiased_gate and output_gate)
    spec = gated_decoder_spec(c, family, moe=lambda c, n: (experts, 0), **options)
    n = spec.layers.decoder
    sparse = _sparse_layers(c, n, only_layers, first_key, first_default)
    dense = _dense_ffn(c, key=dense_key) if not all(sparse) else experts
    assert spec.attention is not None  # gated_decoder_spec always builds it
    att = replace(spec.attention, output_gate=output_gate, head_gate=head_gate,
                  gate_bias=gate_bias, sinks=sinks == "all",
                  v_head_dim=c.int("v_head_dim", v_head_dim) if v_head_dim else None)
    sliding = _sliding(c, att, sliding_kv_times, sinks)
    return with_pattern(replace(spec, attention=att), c, layer_mixers(c, n),
                        [experts if s else dense for s in sparse],
                        attention={"sliding": sliding} if sliding != att else None,
                        shares_kv=shares_kv, mixer_spec=mixer_spec)


def _refuse_biases(c: Config, experts: FfnSpec, *, shared_mlp_bias: bool, gate: bool) -> None:
    """moe_spec's biases it does not read: mlp_bias on the shared expert alone (with
    ``shared_mlp_bias``), attention_bias on Q but not on its output gate (with ``gate``)."""
    if shared_mlp_bias and experts.shared_d_ff and c.bool("mlp_bias", False):
        raise c.fail("mlp_bias", "false (biases on the shared expert alone are not read)")
    if gate and c.bool("attention_bias", False):
        raise c.fail("attention_bias", "false (biases on Q but not on its output gate are not "
                     "read)")


def _sparse_layers(c: Config, n: int, only_layers: tuple[int, ...] | None,
                   first_key: str | None, first_default: int) -> list[bool]:
    """moe_spec's sparse layers (:func:`sparse_steps` or :func:`mlp_kinds`), at least one."""
    sparse = (sparse_steps(c, n, only_layers) if only_layers is not None
              else mlp_kinds(c, n, first_key, first_default))
    if not any(sparse):
        key = ("mlp_only_layers" if only_layers is not None and "mlp_layer_types" not in c.data
               else first_key if first_key in c.data else "mlp_layer_types")
        raise c.fail(key, "at least one sparse layer")
    return sparse


def _sliding(c: Config, att: AttentionSpec, times: int, sinks: str) -> AttentionSpec:
    """The sliding layers' attention: ``times`` the key-value heads, sinks unless "none"."""
    kv = (att.kv_heads or att.heads) * times
    if att.heads % kv:
        raise c.fail("num_key_value_heads", f"a divisor of num_attention_heads / "
                     f"{times} ({att.heads // times}): sliding layers "
                     f"have {times} times as many")
    return replace(att, kv_heads=kv, sinks=sinks != "none")


def laguna_spec(c: Config) -> ModelSpec:
    """LagunaForCausalLM: Q/K norms, an output gate of one scalar per head when ``gating`` is
    true or "per-head" (else one per channel), a score-correction bias that is a parameter, a
    shared expert of shared_expert_intermediate_size, the first layer dense; each layer's
    query heads by ``num_attention_heads_per_layer``."""
    per_head = c.data.get("gating", True) in (True, "per-head")
    spec = moe_spec(c, "laguna", shared_width="shared_expert_intermediate_size", router_bias=True,
                    first_key=None, first_default=1, qk_norm="head", head_gate=per_head,
                    output_gate=not per_head, unbiased_gate=True)
    assert spec.attention is not None  # moe_spec always builds it
    kinds = spec.decoder_kinds()
    heads = c.data.get("num_attention_heads_per_layer")
    if heads is None:
        return spec
    kv = spec.attention.kv_heads or spec.attention.heads
    if not isinstance(heads, list) or len(heads) != len(kinds) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 < h <= MAX_INT and h % kv == 0
            for h in heads):
        raise c.fail("num_attention_heads_per_layer", f"a list of {len(kinds)} head counts, "
                     f"each a multiple of num_key_value_heads ({kv})")
    return replace(spec, pattern=tuple(
        replace(k, attention=replace(k.attention or spec.attention, heads=h))
        for k, h in zip(kinds, heads, strict=True)))


def minimax_m3_text_spec(c: Config) -> ModelSpec:
    """MiniMaxM3VLForCausalLM's language model: Q/K norms, experts of intermediate_size with a
    shared expert of shared_intermediate_size, dense layers of dense_intermediate_size by
    mlp_layer_types. Layers of full attention only: the sparse layers' indexer (its own
    projections, norms and cached keys) is not read."""
    types = c.data.get("layer_types")
    if isinstance(types, list) and "minimax_m3_sparse" in types:
        raise c.fail("layer_types", "full_attention layers only (the indexer of the "
                     "minimax_m3_sparse layers is not read)")
    return moe_spec(c, "minimax_m3_vl_text", experts_key="num_local_experts",
                    d_ff_key="intermediate_size", shared_width="shared_intermediate_size",
                    first_key=None, dense_key="dense_intermediate_size", qk_norm="head",
                    qkv_bias=False, out_bias=False)


# Kolibri 1.1's default reading of K and V: for each indexed-attention layer, which of them
# (by rank) it reads (transformers' Kolibri1_1Config).
_KOLIBRI_SOURCES = (0, 0, 0, 3, 4, 5, 5, 5, 5, 0)


def kolibri1_1_spec(c: Config) -> ModelSpec:
    """Kolibri1_1ForCausalLM: Kolibri 1's layers (four norms, Q/K norms, a shared expert),
    sliding layers and indexed-attention layers (every fifth by default), which attend fully as
    far as parameters and cache go: their indexer has no weights. A layer whose
    ``kv_source_layers`` entry is another layer reads that layer's K and V and has no K, V or K
    norm of its own; ``mlp_only_layers`` (default 0 and 1) are dense, of
    mlp_only_intermediate_size."""
    n = c.int("num_hidden_layers")
    types = _kolibri_types(c, n)
    sources = _kolibri_sources(c, n, types)
    full = ["full_attention" if t == "indexed_attention" else t for t in types]
    return moe_spec(Config({**c.data, "layer_types": full}, c.source), "kolibri1_1",
                    experts_key="num_local_experts",
                    shared_width="shared_expert_intermediate_size", only_layers=(0, 1),
                    dense_key="mlp_only_intermediate_size", qk_norm="head",
                    norm=GEMMA2_NORM, qkv_bias=False, out_bias=False,
                    shares_kv=[s != i for i, s in enumerate(sources)])


def _kolibri_types(c: Config, n: int) -> list[str]:
    """layer_types, else every fifth layer indexed, the others sliding."""
    return c.names("layer_types", n, ("indexed_attention", "sliding_attention")) or [
        "indexed_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)]


def _kolibri_sources(c: Config, n: int, types: list[str]) -> list[int]:
    """Each layer's K and V source: kv_source_layers, else _KOLIBRI_SOURCES's choice."""
    indexed = [i for i, t in enumerate(types) if t == "indexed_attention"]
    sources = c.ints("kv_source_layers")
    if not sources and len(indexed) <= len(_KOLIBRI_SOURCES):
        sources = list(range(n))
        for i, rank in zip(indexed, _KOLIBRI_SOURCES, strict=False):
            sources[i] = indexed[rank]
    if len(sources) != n or any(s > i for i, s in enumerate(sources)):
        raise c.fail("kv_source_layers", f"a list of {n} layers, each itself or an earlier one")
    return sources


def minimax_spec(c: Config) -> ModelSpec:
    """MiniMaxForCausalLM (MiniMax-Text-01): layers of full attention or of lightning attention
    by layer_types (``linear_attention``: LinearMixerSpec kind "lightning", as many heads as
    attention and as wide), every FFN a mixture of SwiGLU experts of intermediate_size."""
    d, heads = c.int("hidden_size"), c.int("num_attention_heads")
    head_dim = c.int("head_dim") if c.data.get("head_dim") is not None else d // heads
    mixer = LinearMixerSpec("lightning", k_heads=heads, v_heads=heads, k_head_dim=head_dim,
                            v_head_dim=head_dim, conv_kernel=1)
    return moe_spec(c, "minimax", experts_key="num_local_experts", d_ff_key="intermediate_size",
                    top_k_default=2, first_key=None, qkv_bias=False, out_bias=False,
                    mixer_spec=mixer)


# Ergo's layers: four RMSNorms and two residual gates (a d_model weight each, counted with the
# norms).
_ERGO_NORMS = NormSpec(kind="rmsnorm", bias=False, per_layer=6, final=True)


def ergo_spec(c: Config) -> ModelSpec:
    """ErgoForCausalLM: Q, K and V in one projection (heads hidden_size / num_attention_heads
    wide, whatever head_dim says), Q/K norms, layers sliding or full by layer_types; FFNs of an
    up and a down projection with the squared ReLU: the first num_dense_blocks layers dense of
    first_dense_intermediate_size, the others routed experts of moe_intermediate_size and a
    shared expert of shared_intermediate_size, each expert followed by an RMSNorm of its own
    (FfnSpec.expert_norm); the head never tied."""
    spec = moe_spec(Config({**c.data, "head_dim": None}, c.source), "ergo",
                    shared_width="shared_intermediate_size", first_key="num_dense_blocks",
                    first_default=1, dense_key="first_dense_intermediate_size",
                    qk_norm="head", norm=_ERGO_NORMS, qkv_bias=False, out_bias=False)
    assert spec.embeddings is not None  # moe_spec always builds them

    def relu2(ffn: FfnSpec) -> FfnSpec:
        return replace(ffn, activation="relu2", gated=False, expert_norm=ffn.is_moe)

    return replace(spec, ffn=relu2(spec.ffn),
                   pattern=tuple(replace(k, ffn=k.ffn and relu2(k.ffn)) for k in spec.pattern),
                   embeddings=replace(spec.embeddings, head="untied"))


# --- s4-moe: DBRX, dots.llm1, HunYuan dense and MoE, LFM2-MoE --------------------------------

def dots1_spec(c: Config) -> ModelSpec:
    """Dots1ForCausalLM (dots.llm1): norms on Q and K, biases on Q, K, V and O by
    attention_bias; DeepSeek-V3's experts (n_routed_experts of moe_intermediate_size, top
    num_experts_per_tok, n_shared_experts run as one FFN that much wider, the score-correction
    bias a buffer), the first first_k_dense_replace layers dense (default none). Its class
    has no default for the three sizes of the mixture: a config must give them."""
    if c.data.get("n_shared_experts") is None:
        raise c.missing("n_shared_experts")
    c = Config({"sliding_window": 4096, "max_window_layers": 62, **c.data}, c.source)
    return moe_spec(c, "dots1", experts_key="n_routed_experts",
                    shared_count=("n_shared_experts", 0), qk_norm="head")


def hunyuan_spec(c: Config, family: str, moe: bool = False) -> ModelSpec:
    """HunYuanDenseV1ForCausalLM and HunYuanMoEV1ForCausalLM: LLaMA's layers with a norm on
    each head's Q and K (query_layernorm, key_layernorm); the MoE's every FFN routed experts
    of intermediate_size (num_experts, default 1, still routed: its router scores the one)
    and a shared expert as wide, top moe_topk (one number, or one a layer). As transformers
    5.25 builds it: the original checkpoints' moe_intermediate_size and num_shared_expert
    are not read."""
    spec = gated_decoder_spec(c, family, qk_norm="head")
    if not moe:
        return spec
    n, d_ff = spec.layers.decoder, c.int("intermediate_size")
    experts = FfnSpec(d_ff=d_ff, activation=spec.ffn.activation, gated=True, bias=False,
                      experts=c.int("num_experts", 1), shared_d_ff=d_ff, routed=True)
    top_k = _per_layer_top_k(c, n, experts.experts)
    ffns = [replace(experts, top_k=k) for k in top_k]
    spec = with_pattern(replace(spec, ffn=ffns[0]), c, layer_mixers(c, n), ffns)
    if len(set(top_k)) == 1:
        return spec
    return replace(spec, pattern=tuple(replace(kind, name=f"top-{k} {kind.name}")
                                       for kind, k in zip(spec.pattern, top_k, strict=True)))


def _per_layer_top_k(c: Config, layers: int, experts: int) -> list[int]:
    """HunYuan-MoE's moe_topk: one top-k for every layer, or a list of one a layer."""
    value = c.data.get("moe_topk")
    if not isinstance(value, list):
        return [c.at_most("moe_topk", c.int("moe_topk", 1), "num_experts", experts)] * layers
    if len(value) != layers or not all(isinstance(k, int) and not isinstance(k, bool)
                                       and 1 <= k <= experts for k in value):
        raise c.fail("moe_topk", f"a top-k, or a list of {layers} (each 1 to num_experts, "
                     f"{experts})")
    return value


# LFM2-MoE's layer_types -> our mixers
_LFM2_MOE_LAYERS = {"conv": "conv", "full_attention": "full"}


def lfm2_moe_spec(c: Config) -> ModelSpec:
    """Lfm2MoeForCausalLM: short-convolution layers (conv_L_cache taps, biases by conv_bias)
    or attention with norms on Q and K, by layer_types (required: its class has none); the
    first num_dense_layers (default 2) a SwiGLU of intermediate_size, the others experts of
    moe_intermediate_size (the routing's expert bias a buffer); two norms a layer and one
    after the last; the head tied by default."""
    n = c.int("num_hidden_layers")
    types = c.data.get("layer_types")
    if types is None:
        raise c.missing("layer_types")
    if not isinstance(types, list) or len(types) != n or not all(
            isinstance(t, str) and t in _LFM2_MOE_LAYERS for t in types):
        raise c.fail("layer_types", f"a list of {n} layer types ({', '.join(_LFM2_MOE_LAYERS)})")
    spec = moe_spec(Config({**c.data, "layer_types": None}, c.source), "lfm2_moe",
                    first_key="num_dense_layers", first_default=2, qk_norm="head",
                    qkv_bias=False, out_bias=False, tie_default=True, seq_default=128000)
    conv = ShortConvSpec(width=spec.d_model, kernel=c.int("conv_L_cache", 3),
                         bias=c.bool("conv_bias", False))
    kinds = spec.decoder_kinds()
    moe = any((k.ffn or spec.ffn).is_moe for k in kinds)
    pattern = tuple(replace(k, name=_kind_name(m, moe and not (k.ffn or spec.ffn).is_moe),
                            mixer=m, mixer_spec=conv if m == "conv" else None)
                    for k, m in zip(kinds, (_LFM2_MOE_LAYERS[t] for t in types), strict=True))
    return replace(spec, pattern=pattern, layers=replace(spec.layers, dense=0), dense_ffn=None)


# DBRX's LayerNorms: two a layer and one after the last, without biases
_DBRX_NORM = NormSpec(kind="layernorm", bias=False, final=True)


def dbrx_spec(c: Config) -> ModelSpec:
    """DbrxForCausalLM: d_model, n_heads, n_layers, max_seq_len; attention (attn_config) with
    kv_n_heads key-value heads, Q, K and V in one projection (Wqkv) and no biases; every FFN
    (ffn_config) moe_num_experts SwiGLU experts of ffn_hidden_size, top moe_top_k, by a
    router without bias, the activation ffn_act_fn's name; LayerNorms without biases; the
    head never tied."""
    attn = Config(c.mapping("attn_config") or {}, f"{c.source}: attn_config")
    ffn = Config(c.mapping("ffn_config") or {}, f"{c.source}: ffn_config")
    act = Config(ffn.mapping("ffn_act_fn") or {}, f"{ffn.source}: ffn_act_fn")
    if c.bool("tie_word_embeddings", False):
        raise c.fail("tie_word_embeddings", "false (DBRX never ties its head)")
    d, heads = c.int("d_model", 2048), c.int("n_heads", 16)
    if d % heads:
        raise c.fail("n_heads", f"a divisor of d_model ({d:,})")
    kv = attn.int("kv_n_heads", 1)
    if heads % kv:
        raise attn.fail("kv_n_heads", f"a divisor of n_heads ({heads})")
    e = ffn.int("moe_num_experts", 4)
    experts = FfnSpec(d_ff=ffn.int("ffn_hidden_size", 3584), activation=act.act("name", "silu"),
                      gated=True, bias=False, experts=e, routed=True,
                      top_k=ffn.at_most("moe_top_k", ffn.int("moe_top_k", 1), "moe_num_experts",
                                        e))
    flat = Config({"hidden_size": d, "num_attention_heads": heads, "num_key_value_heads": kv,
                   "num_hidden_layers": c.int("n_layers", 24),
                   "max_position_embeddings": c.int("max_seq_len", 2048),
                   "vocab_size": c.int("vocab_size", 32000)}, c.source)
    spec = gated_decoder_spec(flat, "dbrx", qkv_bias=False, out_bias=False, norm=_DBRX_NORM,
                              moe=lambda c, n: (experts, 0))
    return replace(spec, name=c.name("dbrx"))
