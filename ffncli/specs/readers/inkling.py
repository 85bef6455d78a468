"""Inkling 2 (issue 40, s4-inkling): Inkling2ForCausalLM's and Inkling2LoopForCausalLM's text
models. Every layer attention, full ("hybrid") or sliding ("hybrid_sliding", its swa_* heads),
with short convolutions on K, V and the stream, relative-position logits and a sink logit
projected from each token, a sigmoid output gate; each layer's inputs are attention over the
earlier blocks (attention residuals); every FFN a mixture of softcapped SwiGLU experts. The
loop's layers run loop_num_passes times a token, with message gates from the previous pass.
Each reader takes its class's defaults for the keys a config omits (transformers 5.25's config
classes, tests/data/zoo/configs)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.base import validate
from ffncli.errors import ConfigError
from ffncli.specs.config import Config
from ffncli.specs.hfconfig import _experts, gated_decoder_spec
from ffncli.specs.layers import LoopsSpec, SideConvSpec
from ffncli.specs.spec import AttentionSpec, LayerKind, ModelSpec

_TYPES = ("hybrid", "hybrid_sliding")  # transformers' names: full, sliding
_MESSAGES = 4  # a loop's messages: to Q, K, V and the FFN's input
# The config classes' defaults of the sizes read (Inkling2TextConfig, Inkling2LoopTextConfig)
_TEXT = dict(hidden_size=4608, num_hidden_layers=48, num_attention_heads=48,
             num_key_value_heads=8, head_dim=128, swa_num_attention_heads=48,
             swa_num_key_value_heads=8, swa_head_dim=128, sliding_window_size=1024, d_rel=16,
             rel_extent=1024, conv_kernel_size=4, moe_intermediate_size=2304,
             n_routed_experts=384, num_experts_per_tok=8, vocab_size=201024,
             unpadded_vocab_size=200058, max_position_embeddings=1048576)
_LOOP = {**_TEXT, **dict(hidden_size=2304, num_hidden_layers=24, num_attention_heads=24,
                         swa_num_attention_heads=24, moe_intermediate_size=1152,
                         n_routed_experts=128, n_layers_per_attn_res_block=6,
                         loop_layer_index_start=6, loop_layer_index_end=18,
                         loop_num_passes=3, loop_gate_rank=64)}


def inkling2_text_spec(c: Config) -> ModelSpec:
    """Inkling2ForCausalLM (defaults: Inkling2TextConfig). Per layer, beside the attention:
    Q's learned scale (heads x head_dim), K and V each d_model -> kv_heads x head_dim through a
    short convolution of conv_kernel_size taps (in the full layers the taps also projected
    from x, kv_heads x taps), the output gate (d_model -> heads x head_dim), a sink projection
    (d_model -> heads), relative logits (d_model -> heads x d_rel, its scale, a d_rel x
    rel_extent table: the window for sliding layers), the stream's two convolutions; norms: two
    in a sliding layer, four in a full one (Q, K and V inputs and the FFN's); attention
    residual queries: one for the FFN's input, one (sliding) or three (full) for attention's
    but in layer 0. Outside the layers: the embedding norm, the last residual query, the final
    norm and a head of unpadded_vocab_size rows, never tied."""
    return _inkling2(_defaults(c, _TEXT), "inkling2_text", loop=range(0), gates=0)


def inkling2_loop_text_spec(c: Config) -> ModelSpec:
    """Inkling2LoopForCausalLM (defaults: Inkling2LoopTextConfig): Inkling 2's layers, those
    from loop_layer_index_start to loop_layer_index_end run loop_num_passes times (the keys
    also read from a checkpoint's loop_config: core_start, core_end, num_passes, gate_rank),
    their weights once. Each looped layer has four message gates of loop_gate_rank; outside
    the layers, four message queries a looped layer."""
    c = _defaults(c, _LOOP)
    start, end, passes = _loop(c)
    return _inkling2(c, "inkling2_loop_text", loop=range(start, end),
                     gates=_loop_key(c, "gate_rank", "loop_gate_rank"), passes=passes)


def _defaults(c: Config, defaults: dict[str, int]) -> Config:
    """The config, the keys it gives under neither spelling at the class's defaults."""
    filled = Config({**{k: v for k, v in defaults.items() if c.data.get(k) is None}, **{
        k: v for k, v in c.data.items() if v is not None}}, c.source)
    filled.spelled = c.spelled  # errors name the spelling the file holds
    return filled


def _inkling2(c: Config, family: str, loop: range, gates: int, passes: int = 1) -> ModelSpec:
    """The layers of either class; ``loop``'s layers run ``passes`` times, with message gates
    of rank ``gates``, each pass after the first with cache layers after the model's."""
    d, n = c.int("hidden_size"), c.int("num_hidden_layers")
    experts = _experts(c, "n_routed_experts", "moe_intermediate_size")
    spec = gated_decoder_spec(c, family, seq_default=1048576,
                              moe=lambda c, n: (experts, 0))
    assert spec.attention is not None and spec.embeddings is not None  # always built
    full = replace(spec.attention, output_gate=True)
    swa_dim = c.int("swa_head_dim")
    swa_heads, swa_kv = c.heads(d, "swa_num_attention_heads", "swa_num_key_value_heads",
                                head_dim=swa_dim)
    sliding = replace(full, heads=swa_heads, kv_heads=swa_kv, head_dim=swa_dim)
    window = c.int("sliding_window_size")

    def kind(i: int, t: str) -> LayerKind:
        slides = t == "hybrid_sliding"
        att = sliding if slides else full
        side = _side(c, d, att, dynamic=not slides,
                     extent=window if slides else c.int("rel_extent"))
        inputs = (1 if slides else 3) if i else 0  # layer 0 reads the embeddings as they are
        side = replace(side, residual_queries=inputs + 1)
        if i in loop:
            side = replace(side, message_gates=_MESSAGES, gate_rank=gates)
        name = " ".join(p for p in ("looped" if i in loop else "first" if not i else "",
                                    "sliding" if slides else "", "decoder") if p)
        return LayerKind(name, mixer="sliding" if slides else "full",
                         window=window if slides else 0, attention=att, mixer_spec=side,
                         norms=2 if slides else 4, runs=passes if i in loop else 1)

    kinds = tuple(kind(i, t) for i, t in enumerate(_layer_types(c, n)))
    return replace(spec, pattern=kinds, residual_queries=1 + _MESSAGES * len(loop),
                   loops=_cache_layers(n, loop, passes) if passes > 1 and loop else None,
                   embeddings=replace(spec.embeddings, norm=True, head="untied",
                                      head_vocab=c.int("unpadded_vocab_size")))


def _cache_layers(n: int, loop: range, passes: int) -> LoopsSpec:
    """Each layer's cache layers: its own; a looped layer's each pass after the first one more,
    after the model's n, as transformers' cache_offset (n - loop.start) numbers them: layer i's
    pass p (p >= 1) at i + n - loop.start + (p - 1) x len(loop)."""
    return LoopsSpec(tuple((i,) + tuple(i + n - loop.start + p * len(loop)
                                        for p in range(passes - 1)) if i in loop else (i,)
                           for i in range(n)))


def _side(c: Config, d: int, att: AttentionSpec, dynamic: bool, extent: int) -> SideConvSpec:
    """A layer's parts beside its attention (SideConvSpec): the convolutions, relative logits
    with their scale, Q's scale, the sink projection; dynamic K and V taps in a full layer."""
    kv, head_dim = att.kv_heads or att.heads, att.head_dim or 0
    return SideConvSpec(kv_width=kv * head_dim, width=d, kernel=c.int("conv_kernel_size"),
                        heads=att.heads, rel_dim=c.int("d_rel"), rel_extent=extent,
                        dynamic_heads=kv if dynamic else 0, query_scale=att.heads * head_dim,
                        rel_scale=True, sink_projection=True)


def _layer_types(c: Config, n: int) -> list[str]:
    """layer_types, checked; absent, every sixth layer full (Inkling2TextConfig's default)."""
    types = c.data.get("layer_types")
    if types is None:
        return ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not all(
            isinstance(t, str) and t in _TYPES for t in types):
        raise c.fail("layer_types", f"a list of {n} layer types ({', '.join(_TYPES)})")
    return types


def _loop_key(c: Config, short: str, key: str) -> int:
    """A loop key: loop_config's ``short`` (a checkpoint's spelling) over ``key``."""
    where = _loop_where(c, short, key)
    if where != c.where(key):
        return validate.whole(where, c.data["loop_config"][short], error=ConfigError)
    return c.int(key)


def _loop_where(c: Config, short: str, key: str) -> str:
    """Where a loop key is: ``<source>: key 'loop_config.short'`` or ``... key 'key'``."""
    nested = c.data.get("loop_config")
    if nested is not None and not isinstance(nested, dict):
        raise c.fail("loop_config", "an object")
    if nested and nested.get(short) is not None:
        return f"{c.where('loop_config')[:-1]}.{short}'"
    return c.where(key)


def _loop(c: Config) -> tuple[int, int, int]:
    """(first looped layer, the layer after the last, passes), as Inkling2LoopTextConfig
    validates them: the ends multiples of n_layers_per_attn_res_block, within the layers."""
    start = _loop_key(c, "core_start", "loop_layer_index_start")
    end = _loop_key(c, "core_end", "loop_layer_index_end")
    passes = _loop_key(c, "num_passes", "loop_num_passes")
    block, n = c.int("n_layers_per_attn_res_block"), c.int("num_hidden_layers")
    for key, value in (("loop_layer_index_start", start), ("loop_layer_index_end", end)):
        if value % block:
            raise c.fail(key, f"a multiple of n_layers_per_attn_res_block ({block})")
    if not start < end <= n:
        raise c.fail("loop_layer_index_end", f"more than loop_layer_index_start ({start}) "
                     f"and at most num_hidden_layers ({n})")
    c.cache_layers("loop_num_passes", passes, n + (passes - 1) * (end - start),
                   _loop_where(c, "num_passes", "loop_num_passes"))
    return start, end, passes
