"""The decoders of GPT's line, each with its own layout of norms and biases: GPT-2, OPT,
GPT-NeoX, Phi, StarCoder 2, GPT-BigCode, GPT-J, Falcon, StableLM, BLOOM and MPT.
"""

from __future__ import annotations

from ffncli.specs.hfconfig import Config, _decoder_only, gated_decoder_spec
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def gpt2_spec(c: Config) -> ModelSpec:
    d = c.int("n_embd", 768)
    return _decoder_only(
        c, "gpt2",
        ffn=FfnSpec(d_ff=c.int("n_inner", 4 * d),
                    activation=c.act("activation_function", "gelu_new")),
        attention=AttentionSpec(heads=c.int("n_head", 12)),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 50257), positions=c.int("n_positions", 1024),
            head="tied" if c.bool("tie_word_embeddings", True) else "untied",
        ),
        layers_key="n_layer", d_key="n_embd", seq_key="n_positions", seq_default=1024,
    )


def opt_spec(c: Config) -> ModelSpec:
    d = c.int("hidden_size", 768)
    bias = c.bool("enable_bias", True)
    pre_norm = c.bool("do_layer_norm_before", True)
    final = pre_norm and not c.bool("_remove_final_layer_norm", False)
    proj_dim = c.int("word_embed_proj_dim", d)
    return _decoder_only(
        c, "opt",
        ffn=FfnSpec(d_ff=c.int("ffn_dim", 3072), activation=c.act("activation_function", "relu"),
                    bias=bias),
        attention=AttentionSpec(heads=c.heads(d, kv_key=None, default=12)[0], qkv_bias=bias,
                                out_bias=bias),
        norm=NormSpec(final=final, affine=c.bool("layer_norm_elementwise_affine", True)),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 50272), dim=proj_dim if proj_dim != d else None,
            positions=c.int("max_position_embeddings", 2048), position_offset=2,
            head="tied" if c.bool("tie_word_embeddings", True) else "untied",
        ),
    )


def gpt_neox_spec(c: Config) -> ModelSpec:
    bias = c.bool("attention_bias", True)
    return _decoder_only(
        c, "gpt_neox",
        ffn=FfnSpec(d_ff=c.int("intermediate_size"), activation=c.act("hidden_act", "gelu")),
        attention=AttentionSpec(heads=c.int("num_attention_heads"), qkv_bias=bias, out_bias=bias),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size"),
            head="tied" if c.bool("tie_word_embeddings", False) else "untied",
        ),
    )


def phi_spec(c: Config) -> ModelSpec:
    """PhiForCausalLM: parallel attention and FFN behind one LayerNorm; lm_head has a bias;
    ``qk_layernorm`` adds a LayerNorm (with bias) of head_dim on queries and on keys."""
    d = c.int("hidden_size")
    heads, kv = c.heads(d, default=32)
    return _decoder_only(
        c, "phi",
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 8192), activation=c.act("hidden_act",
                                                                             "gelu_new")),
        attention=AttentionSpec(heads=heads, kv_heads=kv,
                                qk_norm="head" if c.bool("qk_layernorm", False) else "none",
                                qk_norm_bias=True),
        norm=NormSpec(per_layer=1, final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 51200),
            head="tied" if c.bool("tie_word_embeddings", False) else "untied", head_bias=True,
        ),
    )


def starcoder2_spec(c: Config) -> ModelSpec:
    d = c.int("hidden_size")
    heads, kv = c.heads(d)
    bias = c.bool("use_bias", True)
    return _decoder_only(
        c, "starcoder2",
        ffn=FfnSpec(d_ff=c.int("intermediate_size"),
                    activation=c.act("hidden_act", "gelu_pytorch_tanh"), bias=bias),
        attention=AttentionSpec(heads=heads, kv_heads=kv, qkv_bias=bias, out_bias=bias),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(True)),
        seq_default=4096,
    )


def gpt_bigcode_spec(c: Config) -> ModelSpec:
    """GPTBigCodeForCausalLM (SantaCoder, StarCoder): multi-query attention by default, one
    fused c_attn of d_model + 2 head_dim outputs; learned positions; nn.Linear everywhere."""
    d = c.int("n_embd")
    heads = c.heads(d, "n_head", None, d_key="n_embd")[0]
    return _decoder_only(
        c, "gpt_bigcode",
        ffn=FfnSpec(d_ff=c.int("n_inner", 4 * d),
                    activation=c.act("activation_function", "gelu_pytorch_tanh")),
        attention=AttentionSpec(heads=heads, kv_heads=1 if c.bool("multi_query", True)
                                else heads),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), positions=c.int("n_positions"),
                                  head=c.head(True)),
        layers_key="n_layer", d_key="n_embd", seq_key="n_positions", seq_default=1024,
    )


def gptj_spec(c: Config) -> ModelSpec:
    """GPTJForCausalLM: attention and FFN in parallel behind one LayerNorm, Q/K/V/out without
    bias, rotary positions, an untied lm_head with a bias."""
    d = c.int("n_embd")
    heads = c.heads(d, "n_head", None, d_key="n_embd")[0]
    return _decoder_only(
        c, "gptj",
        ffn=FfnSpec(d_ff=c.int("n_inner", 4 * d), activation=c.act("activation_function",
                                                                   "gelu_new")),
        attention=AttentionSpec(heads=heads, qkv_bias=False, out_bias=False),
        norm=NormSpec(per_layer=1, final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(False),
                                  head_bias=True),
        layers_key="n_layer", d_key="n_embd", seq_key="n_positions",
    )


def falcon_spec(c: Config) -> ModelSpec:
    """FalconForCausalLM. New decoder architecture (40B, 180B): num_kv_heads K/V heads and two
    LayerNorms (ln_attn, ln_mlp) unless num_ln_in_parallel_attn is 1. Old (7B): multi-query
    when multi_query, one LayerNorm with parallel_attn, two without."""
    d = c.int("hidden_size")
    new = c.bool("new_decoder_architecture", False)
    heads = c.alias(("num_attention_heads", "n_head"))
    if new:
        kv = c.int("num_kv_heads", heads)
        if kv > heads or heads % kv:
            raise c.fail("num_kv_heads", f"a divisor of num_attention_heads ({heads})")
    else:
        kv = 1 if c.bool("multi_query", True) else heads
    if d % heads:
        raise c.fail("num_attention_heads", f"a divisor of hidden_size ({d:,})")
    bias = c.bool("bias", False)
    parallel = c.bool("parallel_attn", True)
    norms = c.int("num_ln_in_parallel_attn", 2 if new else 1) if parallel else 2
    return _decoder_only(
        c, "falcon",
        ffn=FfnSpec(d_ff=c.int("ffn_hidden_size", 4 * d), activation=c.act("activation",
                                                                            "gelu"), bias=bias),
        attention=AttentionSpec(heads=heads, kv_heads=kv, qkv_bias=bias, out_bias=bias),
        norm=NormSpec(per_layer=min(norms, 2), final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(True)),
        layers_key="num_hidden_layers" if "n_layer" not in c.data else "n_layer",
    )


def stablelm_spec(c: Config) -> ModelSpec:
    """StableLmForCausalLM: LayerNorms with bias (one with use_parallel_residual), biases on
    Q/K/V with use_qkv_bias, per-head LayerNorms without bias on Q and K with qk_layernorm."""
    parallel = c.bool("use_parallel_residual", False)
    return gated_decoder_spec(
        c, "stablelm", qkv_bias=c.bool("use_qkv_bias", False), out_bias=False,
        norm=NormSpec(per_layer=1 if parallel else 2, final=True),
        qk_norm="heads" if c.bool("qk_layernorm", False) else "none",
    )


def bloom_spec(c: Config) -> ModelSpec:
    """BloomForCausalLM: ALiBi (no position table), a LayerNorm after the word embeddings,
    fused Q/K/V with biases, a 4 x d_model FFN with the tanh GELU, tied head."""
    d = c.alias(("hidden_size", "n_embed"))
    heads = c.alias(("n_head", "num_attention_heads"))
    if d % heads:
        raise c.fail("n_head", f"a divisor of hidden_size ({d:,})")
    return ModelSpec(
        name=c.name("bloom"), family="bloom", description=f"from {c.source}", d_model=d,
        seq_len=2048,
        ffn=FfnSpec(d_ff=4 * d, activation="gelu_tanh"),
        attention=AttentionSpec(heads=heads),
        norm=NormSpec(final=True),
        layers=LayersSpec(encoder=0, decoder=c.alias(("n_layer", "num_hidden_layers"))),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), norm=True, head=c.head(True)),
    )


def mpt_spec(c: Config) -> ModelSpec:
    """MptForCausalLM as transformers builds it: ALiBi, no biases anywhere (LayerNorms
    included), a 4 x d_model exact-GELU FFN, tied head. Configs it cannot build are refused."""
    d = c.int("d_model")
    heads = c.heads(d, "n_heads", None, d_key="d_model")[0]
    if c.data.get("expansion_ratio", 4) != 4:
        raise c.fail("expansion_ratio", "4 (transformers' MptForCausalLM builds a "
                      "4 x d_model FFN whatever the config says)")
    if not c.bool("no_bias", True):
        raise c.fail("no_bias", "true (transformers' MptForCausalLM has no biases)")
    return _decoder_only(
        c, "mpt",
        ffn=FfnSpec(d_ff=4 * d, activation="gelu", bias=False),
        attention=AttentionSpec(heads=heads, qkv_bias=False, out_bias=False),
        norm=NormSpec(bias=False, final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(True)),
        layers_key="n_layers", d_key="d_model", seq_key="max_seq_len",
    )
