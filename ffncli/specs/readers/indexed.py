"""Decoders whose full-attention layers select the tokens they attend by an indexer of their
own (issue 40): Qwen4-Exp's QSA, beside Qwen 3.5's Gated DeltaNet layers and mixture of experts,
its residual stream widened to hc_count copies joined by gated residuals."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config
from ffncli.specs.readers.ssm_family import qwen3_next_spec
from ffncli.specs.spec import ModelSpec, NormSpec

# No norm of d_model in a layer (each gated residual's norm is its own part) and none after the
# last layer (the gated residual head's instead).
_NO_NORMS = NormSpec(kind="rmsnorm", bias=False, per_layer=0, final=False)


def qwen4_exp_text_spec(c: Config) -> ModelSpec:
    """Qwen4ExpForCausalLM (qwen4_exp_text): Gated DeltaNet layers and indexed-attention layers
    by layer_types (by default every full_attention_interval-th layer indexed; "full_attention"
    read as indexed, as transformers does), each indexed layer Qwen3-Next's gated attention with
    the QSA indexer (indexer_n_heads queries and indexer_kv_heads = 1 key of indexer_head_dim),
    every FFN num_experts experts with a gated shared expert; attention and FFN each inside a
    gated residual over hc_count streams of rank hc_lowrank, and a gated residual head after the
    last layer. Its per-layer n-gram embeddings (ple_layer_ids) are not read."""
    if c.data.get("ple_layer_ids"):
        raise c.fail("ple_layer_ids", "an empty list (Qwen4-Exp's per-layer n-gram "
                     "embeddings are not read)")
    if c.int("indexer_kv_heads") != 1:
        raise c.fail("indexer_kv_heads", "1 (QSA's one key head)")
    spec = qwen3_next_spec(Config({**c.data, "layer_types": _layer_types(c)}, c.source),
                           "qwen4_exp_text")
    assert spec.attention is not None  # qwen3_next_spec always builds it
    attention = replace(spec.attention, qsa_heads=c.int("indexer_n_heads"),
                        qsa_head_dim=c.int("indexer_head_dim"))
    return replace(spec, attention=attention, norm=_NO_NORMS,
                   hyper_streams=c.int("hc_count", 4), hyper_rank=c.int("hc_lowrank", 320))


def _layer_types(c: Config) -> list[str]:
    """transformers' layer_types with indexed_attention as full_attention (its parameters and
    cache are full attention's, with the indexer's)."""
    n = c.int("num_hidden_layers")
    types = c.names("layer_types", n, ("linear_attention", "indexed_attention",
                                        "full_attention"), shown=("linear_attention",
                                                                  "indexed_attention"))
    if types is None:
        every = c.int("full_attention_interval", 4)
        return ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                for i in range(n)]
    return ["linear_attention" if t == "linear_attention" else "full_attention" for t in types]
