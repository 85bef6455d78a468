"""Latent-attention variants (issue 40): DeepSeek-V3's multi-head latent attention (MLA) in
dense decoders (MiniCPM3, Youtu), behind GLM-4.5's mixture of experts with a per-layer
``mlp_layer_types`` (GLM-4.7-Flash, A.X-K1), with DeepSeek-V3.2's lightning indexer (DeepSeek
Sparse Attention: DeepSeek-V3.2, GLM-5), and LongCat-Flash's two attention sublayers a layer
with zero (identity) experts. Built from the kit of :mod:`ffncli.specs.hfconfig`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.specs.hfconfig import (
    Config,
    _dense_ffn,
    _experts,
    gated_decoder_spec,
    with_pattern,
)
from ffncli.specs.spec import AttentionSpec, LayerKind, ModelSpec, NormSpec


def latent_attention(c: Config, *, indexer: bool = False,
                     v_head_dim: int | None = None) -> AttentionSpec:
    """Multi-head latent attention as DeepseekV2Attention builds it: queries through
    q_lora_rank (straight when null), K and V from a kv_lora_rank latent plus one rope key;
    with ``indexer`` DeepSeek-V3.2's indexer (index_n_heads x index_head_dim), which needs the
    query latent. ``v_head_dim``: the value width when the config leaves it null."""
    d = c.int("hidden_size")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    kv_rank = c.at_most("kv_lora_rank", c.int("kv_lora_rank"), "hidden_size", d)
    q_rank = c.at_most("q_lora_rank", c.int("q_lora_rank") if indexer else c.int0("q_lora_rank"),
                       "hidden_size", d)
    bias = c.bool("attention_bias", False)
    return AttentionSpec(
        heads=c.int("num_attention_heads"), head_dim=nope + rope, qkv_bias=bias, out_bias=bias,
        kv_lora_rank=kv_rank, q_lora_rank=q_rank, rope_head_dim=rope,
        v_head_dim=c.int("v_head_dim", v_head_dim),
        index_heads=c.int("index_n_heads") if indexer else 0,
        index_head_dim=c.int("index_head_dim") if indexer else 0)


def dense_latent_spec(c: Config, family: str, *, tie_default: bool = True) -> ModelSpec:
    """MiniCPM3ForCausalLM, YoutuForCausalLM: LLaMA's layers (SwiGLU FFN of intermediate_size,
    two RMSNorms) with latent attention; MiniCPM3's value heads are hidden_size / heads wide
    when v_head_dim is null. Embedding and residual scales are constants, not parameters."""
    spec = gated_decoder_spec(c, family, tie_default=tie_default)
    d, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return replace(spec, attention=latent_attention(c, v_head_dim=max(d // heads, 1)))


# The keys each family's config class derives mlp_layer_types from when a config has none
# (GLM-4.7-Flash's and HY-V4's read neither: always one dense layer first).
_DENSE_KEYS = {"glm4_moe_lite": (), "hy_v4": (), "deepseek_v32": ("first_k_dense_replace",),
               "glm_moe_dsa": ("first_k_dense_replace",)}
_FIRST_AND_FREQ = ("first_k_dense_replace", "moe_layer_freq")  # A.X-K1, A.X-K2, dots.llm3


def _mlp_types(c: Config, n: int, dense_first: int, family: str) -> list[bool]:
    """Which layers are a mixture of experts: ``mlp_layer_types`` ("dense", "sparse"), else as
    the family's class derives it: first_k_dense_replace (default ``dense_first``) dense
    layers, then, of the others, those moe_layer_freq divides (or a list says) sparse."""
    kinds = c.names("mlp_layer_types", n, ("sparse", "dense"))
    keys = _DENSE_KEYS.get(family, _FIRST_AND_FREQ)
    if kinds is None:
        dense = dense_first
        if "first_k_dense_replace" in keys:
            dense = c.at_most("first_k_dense_replace",
                              c.int0("first_k_dense_replace", dense_first), "num_hidden_layers", n)
        freq = c.data.get("moe_layer_freq") if "moe_layer_freq" in keys else None
        if isinstance(freq, list) and len(freq) == n:
            return [i >= dense and bool(f) for i, f in enumerate(freq)]
        step = c.int("moe_layer_freq", 1) if freq is not None else 1
        return [i >= dense and i % step == 0 for i in range(n)]
    return [k == "sparse" for k in kinds]


def _indexer_layers(c: Config, n: int, family: str) -> list[bool]:
    """GLM-5 (glm_moe_dsa) and HY-V4: the layers indexer_types names "full" run their own
    indexer, the "shared" ones reuse the last full layer's choice and hold no indexer. Without
    the key, GLM-5's index_topk_pattern (F and S) or every index_topk_freq-th layer from
    index_skip_topk_offset - 1; HY-V4's layer 0 and every 4th from 1; the others' every
    layer."""
    kinds = c.data.get("indexer_types")
    if kinds is None and family == "glm_moe_dsa" and c.data.get("index_topk_pattern"):
        pattern = c.data["index_topk_pattern"]
        kinds = [{"F": "full", "S": "shared"}.get(k, k) for k in pattern] \
            if isinstance(pattern, str) else pattern
    elif kinds is None:
        return _default_indexers(c, n, family)
    if not isinstance(kinds, list) or len(kinds) != n or not all(
            k in ("full", "shared") for k in kinds):
        raise c.fail("indexer_types", f"a list of {n} indexer types (full, shared)")
    return [k == "full" for k in kinds]


def _default_indexers(c: Config, n: int, family: str) -> list[bool]:
    """The layers with their own indexer when neither indexer_types nor a pattern says."""
    if family == "glm_moe_dsa":
        freq, offset = c.int("index_topk_freq", 1), c.int0("index_skip_topk_offset", 2)
        return [max(i - offset + 1, 0) % freq == 0 for i in range(n)]
    if family == "hy_v4":
        return [i == 0 or (i - 1) % 4 == 0 for i in range(n)]
    return [True] * n


def latent_moe_spec(c: Config, family: str, *, dense_first: int = 1, indexer: bool = False,
                    post_moe_norm: bool = False, gated: bool = False,
                    hyper: bool = False) -> ModelSpec:
    """Glm4MoeLiteForCausalLM (GLM-4.7-Flash) and its kin: latent attention (and with
    ``indexer`` DeepSeek-V3.2's indexer, on the layers indexer_types runs it), each layer a
    dense SwiGLU FFN of intermediate_size or, as mlp_layer_types says, n_routed_experts
    experts of moe_intermediate_size (top num_experts_per_tok) with n_shared_experts shared
    ones run as one FFN that much wider, and a router without bias (its score-correction
    bias is a buffer). ``post_moe_norm``: A.X-K1's RMSNorm on the mixture's output, a third
    norm in those layers. ``gated``: A.X-K2's queries and output gate from twice the query
    latent (q_gate_proj), and its gated norms (gated_norm_rank) before attention and, in the
    sparse layers, before the FFN. ``hyper``: HY-V4's gate on each head's output (heads x
    v_head_dim from x), attention sinks, and hyper-connections over hc_mult streams."""
    shared = c.int0("n_shared_experts", 1) * c.int("moe_intermediate_size")
    experts = _experts(c, "n_routed_experts", "moe_intermediate_size", shared_d_ff=shared)
    spec = gated_decoder_spec(c, family, moe=lambda c, n: (experts, 0))
    n = spec.layers.decoder
    sparse = _mlp_types(c, n, dense_first, family)
    attention = replace(latent_attention(c, indexer=indexer), query_gate=gated,
                        output_gate=hyper, sinks=hyper)
    spec = replace(spec, hyper_streams=c.int("hc_mult", 4) if hyper else 0)
    spec = with_pattern(replace(spec, attention=attention), c, ["full"] * n,
                        [experts if s else _dense_ffn(c) for s in sparse])
    own = _indexer_layers(c, n, family) if indexer else [True] * n
    no_indexer = replace(attention, index_heads=0, index_head_dim=0)
    rank = c.int("gated_norm_rank", 16) if gated else 0
    return _per_layer(spec, [attention if mine else no_indexer for mine in own],
                      [dict(norms=3 if post_moe_norm and s else None,
                            gated_norms=(1 + s) if gated else 0, norm_gate_rank=rank)
                       for s in sparse])


def _per_layer(spec: ModelSpec, attentions: list[AttentionSpec],
               changes: list[dict[str, Any]]) -> ModelSpec:
    """The spec's layers, each its own attention (the spec's where equal) and the changes of
    its LayerKind (norms, gated norms)."""
    kinds = tuple(replace(k, attention=None if a == spec.attention else a, **more)
                  for k, a, more in zip(spec.decoder_kinds(), attentions, changes, strict=True))
    return replace(spec, pattern=kinds)


# dots.llm3's sliding layers without per_layer_config (Dots3NoteTextConfig's swa_* keys)
_SWA = {"num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1024,
        "kv_lora_rank": 1024, "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}
_DOTS3_LAYERS = {"indexed_attention": "full", "full_attention": "full",
                 "sliding_attention": "sliding"}


def _dots3_layers(c: Config, n: int) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """Each layer's type, and the keys per_layer_config changes for some layers. Without
    per_layer_config the sliding layers take the swa_* keys (defaults _SWA), and without
    layer_types layers 0, 1 and every 4th from 1 are full, with use_dsa an indexer's."""
    types = _dots3_types(c, n)
    per = c.data.get("per_layer_config")
    if per is None:
        types, per = _dots3_swa(c, types)
    if not isinstance(per, dict) or not all(
            isinstance(k, str) and k.isdigit() and int(k) < n and isinstance(v, dict)
            for k, v in per.items()):
        raise c.fail("per_layer_config", f"an object of layer numbers (below {n}) to keys")
    return types, {int(k): v for k, v in per.items()}


def _dots3_types(c: Config, n: int) -> list[str]:
    """layer_types, else layers 0, 1 and every 4th from 1 indexed, the others sliding."""
    return c.names("layer_types", n, tuple(_DOTS3_LAYERS)) or [
        "indexed_attention" if i < 2 or i % 4 == 1 else "sliding_attention" for i in range(n)]


def _dots3_swa(c: Config, types: list[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Without per_layer_config: the full layers indexed when use_dsa, and the sliding layers'
    keys from the swa_* keys (defaults _SWA)."""
    dsa = c.bool("use_dsa", True)
    types = ["indexed_attention" if t == "full_attention" and dsa else t for t in types]
    swa = {k: c.data.get(f"swa_{k}", v) for k, v in _SWA.items()}
    swa["qk_rope_head_dim"] = c.data.get("swa_qk_rope_head_dim",
                                         swa["head_dim"] - swa["qk_nope_head_dim"])
    return types, {str(i): swa for i, t in enumerate(types) if t == "sliding_attention"}


def dots3_note_text_spec(c: Config) -> ModelSpec:
    """Dots3NoteForCausalLM (dots.llm3's language model): latent attention with a sigmoid gate
    per head (g_proj) and a norm on the rope key, DeepSeek-V3.2's indexer on the
    "indexed_attention" layers, sliding-window layers of their own sizes (per_layer_config: its
    keys override the config's in the layers it names), each layer a dense FFN or, as
    mlp_layer_types says, experts of moe_intermediate_size with n_shared_experts shared ones
    of shared_experts_intermediate_size."""
    c = Config({**c.data, "sliding_window": c.data.get("sliding_window")
                or c.int("sliding_window_size", 512)}, c.source)
    shared = c.int0("n_shared_experts", 1) * c.int("shared_experts_intermediate_size")
    experts = _experts(c, "n_routed_experts", "moe_intermediate_size", shared_d_ff=shared)
    spec = gated_decoder_spec(c, "dots3_note_text", moe=lambda c, n: (experts, 0))
    n = spec.layers.decoder
    types, per = _dots3_layers(c, n)
    sparse = _mlp_types(c, n, 1, "dots3_note_text")
    spec = with_pattern(spec, c, [_DOTS3_LAYERS[t] for t in types],
                        [experts if s else _dense_ffn(c) for s in sparse])

    def attention(i: int) -> AttentionSpec:
        layer = Config({**c.data, **per.get(i, {})}, f"{c.source}: per_layer_config {i}")
        return replace(latent_attention(layer, indexer=types[i] == "indexed_attention"),
                       head_gate=True, rope_key_norm=True)
    attentions = [attention(i) for i in range(n)]
    return _per_layer(replace(spec, attention=attentions[0]), attentions, [{}] * n)


def longcat_flash_spec(c: Config) -> ModelSpec:
    """LongcatFlashForCausalLM: num_layers layers of two latent-attention sublayers (each its
    own cache), two dense SwiGLU FFNs of ffn_hidden_size, four RMSNorms, and a shortcut
    mixture of n_routed_experts SwiGLU experts of expert_ffn_hidden_size whose router (a
    linear layer, bias by router_bias) also scores zero_expert_num zero (identity) experts:
    of its moe_topk choices those that fall on a zero expert cost nothing, so a token uses
    between max(0, moe_topk - zero_expert_num) and moe_topk routed experts. The two dense FFNs
    run for every token and are counted as a shared expert twice ffn_hidden_size wide."""
    c = Config({**c.data, "num_hidden_layers": c.int("num_layers")}, c.source)
    experts = _experts(c, "n_routed_experts", "moe_intermediate_size", 12,
                       router_bias=c.bool("router_bias", False),
                       zero_experts=c.int0("zero_expert_num", 0),
                       shared_d_ff=2 * c.int("intermediate_size"))
    spec = gated_decoder_spec(c, "longcat_flash", moe=lambda c, n: (experts, 0),
                              norm=NormSpec(kind="rmsnorm", bias=False, per_layer=4),
                              seq_default=131072)
    n = spec.layers.decoder
    return replace(spec, attention=latent_attention(c),
                   pattern=(LayerKind(attentions=2),) * n)
