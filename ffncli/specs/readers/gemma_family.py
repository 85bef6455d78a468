"""Gemma's decoders: Gemma 1 to 3, VaultGemma and Gemma 3n's language model (embeddings scaled,
norms by 1 + weight, the head tied). The table also names the kit's
:func:`~ffncli.specs.hfconfig.gemma_spec` here (Gemma 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.base.validate import MAX_INT
from ffncli.specs.hfconfig import (
    GEMMA2_NORM,
    Config,
    gemma_spec,
    layer_mixers,
    windowed,
    with_pattern,
)
from ffncli.specs.layers import LayerExtrasSpec
from ffncli.specs.spec import LayerKind, ModelSpec


def gemma2_spec(c: Config) -> ModelSpec:
    """Gemma 2: four norms a layer, layers sliding or full by layer_types (all full without
    them)."""
    return windowed(lambda c: gemma_spec(c, "gemma2", norm=GEMMA2_NORM))(c)


def gemma3_text_spec(c: Config, family: str) -> ModelSpec:
    """Gemma 3's language model: Gemma 2's four norms a layer, a norm on Q and on K, layers
    sliding or full by layer_types."""
    spec = gemma_spec(c, family, norm=GEMMA2_NORM, qk_norm="head")
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def patterned_gemma(c: Config, family: str, **options: Any) -> ModelSpec:
    """A Gemma whose layers follow layer_types (VaultGemma: two norms a layer)."""
    spec = gemma_spec(c, family, **options)
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def gemma3n_text_spec(c: Config) -> ModelSpec:
    """Gemma3nForCausalLM: Gemma 3's layers (four norms, Q and K norms, sliding or full by
    layer_types) with a width of FFN per layer (intermediate_size a list), the last
    num_kv_shared_layers reusing earlier layers' K and V (no K, V or K norm of their own),
    and Gemma 3n's AltUp, LAuReL and per-layer inputs (LayerExtrasSpec)."""
    n = c.int("num_hidden_layers")
    sizes = c.data.get("intermediate_size")
    sizes = [sizes] * n if isinstance(sizes, int) and not isinstance(sizes, bool) else sizes
    if not isinstance(sizes, list) or len(sizes) != n or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INT for v in sizes):
        raise c.fail("intermediate_size", f"a width or a list of {n} widths")
    first = Config({**c.data, "intermediate_size": sizes[0]}, c.source)
    spec = gemma_spec(first, "gemma3n_text", norm=GEMMA2_NORM, qk_norm="head")
    shared = c.at_most("num_kv_shared_layers", c.int0("num_kv_shared_layers", 0),
                       "num_hidden_layers", n)
    extras = LayerExtrasSpec(
        altup_inputs=c.int("altup_num_inputs", 4), laurel_rank=c.int("laurel_rank", 64),
        per_layer_width=c.int("hidden_size_per_layer_input", 256),
        per_layer_vocab=c.int("vocab_size_per_layer_input", 262144))
    spec = with_pattern(replace(spec, extras=extras), c, layer_mixers(c, n),
                        [replace(spec.ffn, d_ff=w) for w in sizes],
                        shares_kv=[i >= n - shared for i in range(n)])
    return spec if spec.pattern else replace(spec, pattern=(LayerKind(),) * n)
