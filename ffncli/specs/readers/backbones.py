"""Text backbones of issue 40 counted as transformers' class builds them: Whisper's decoder
alone, CPM-Ant, NeoMME's bare model, MusicGen's decoder."""

from __future__ import annotations

from ffncli.specs.hfconfig import Config, _with_defaults
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def whisper_spec(c: Config) -> ModelSpec:
    """WhisperForCausalLM: Whisper's text decoder without its audio encoder: pre-norm layers
    with cross-attention to an encoder outside the model (as TrOCR's), W_K without a bias in
    both attentions, a learned position table of max_target_positions rows, a final
    LayerNorm, the head tied (proj_out)."""
    c = _with_defaults(c, vocab_size=51865, d_model=384, decoder_layers=4,
                       decoder_attention_heads=6, decoder_ffn_dim=1536,
                       max_target_positions=448)
    seq, d, heads = c.int("max_target_positions"), c.int("d_model"), \
        c.int("decoder_attention_heads")
    if d % heads:
        raise c.fail("decoder_attention_heads", f"a divisor of d_model ({d:,})")
    return ModelSpec(
        name=c.name("whisper"), family="whisper", description=f"from {c.source}",
        d_model=d, seq_len=seq,
        ffn=FfnSpec(d_ff=c.int("decoder_ffn_dim"),
                    activation=c.act("activation_function", "gelu")),
        attention=AttentionSpec(heads=heads, key_bias=False),
        norm=NormSpec(final=True),
        layers=LayersSpec(encoder=0, decoder=c.int("decoder_layers"), cross=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), positions=seq, head=c.head(True)),
    )


def cpmant_spec(c: Config) -> ModelSpec:
    """CpmAntForCausalLM (CPM-Ant): RMS-normed pre-norm layers without biases, heads of
    dim_head, a GELU-gated FFN of dim_ff; one word table holding the vocabulary and
    prompt_types x prompt_length prompt rows, a segment table of segment_types rows, one
    relative-position table (segment_types squared plus position_bias_num_buckets rows, a
    column a head), a head of the vocabulary alone (not tied: the tables differ). The cache
    also holds the prompt_length prompt tokens in every layer."""
    c = _with_defaults(c, vocab_size=30720, hidden_size=4096, num_attention_heads=32,
                       dim_head=128, dim_ff=10240, num_hidden_layers=48, prompt_types=32,
                       prompt_length=32, segment_types=32, position_bias_num_buckets=512)
    prompts, segments = c.int0("prompt_length"), c.int("segment_types")
    return ModelSpec(
        name=c.name("cpmant"), family="cpmant", description=f"from {c.source}",
        d_model=c.int("hidden_size"), seq_len=1024,
        ffn=FfnSpec(d_ff=c.int("dim_ff"), activation="gelu", gated=True, bias=False),
        attention=AttentionSpec(
            heads=c.int("num_attention_heads"), head_dim=c.int("dim_head"), qkv_bias=False,
            out_bias=False, prompt_tokens=prompts,
            relative_buckets=segments * segments + c.int("position_bias_num_buckets")),
        norm=NormSpec(kind="rmsnorm", bias=False, final=True),
        layers=LayersSpec(encoder=0, decoder=c.int("num_hidden_layers")),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), token_types=segments,
                                  extra_rows=c.int0("prompt_types") * prompts, head="untied"),
    )


def neomme_spec(c: Config) -> ModelSpec:
    """NeoMMEModel (counted as the bare model, as BERT is): encoder layers (sliding or full by
    layer_types, alike in parameters) of grouped-query attention without biases or norm
    weights, a sigmoid gate of heads x head_dim from x on its output (counted with W_Q, as
    Qwen3-Next's), an alpha per head and two residual lambdas; a squared-ReLU FFN without gate;
    word vectors of embedding_rank projected to hidden_size (no bias), value embeddings of
    num_key_value_heads x head_dim a token, an image patch embedder of 3 x patch_size^2 inputs;
    its norms carry no weights, there is no head."""
    d, head_dim = c.int("hidden_size"), c.int("head_dim")
    heads, kv = c.heads(d, head_dim=head_dim)
    bias = c.bool("attention_bias", False)
    return ModelSpec(
        name=c.name("neomme"), family="neomme", description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings"),
        ffn=FfnSpec(d_ff=c.int("intermediate_size"), activation=_activation(c),
                    bias=c.bool("mlp_bias", False)),
        attention=AttentionSpec(heads=heads, kv_heads=kv, head_dim=head_dim, qkv_bias=bias,
                                out_bias=bias, output_gate=True, learned_scalars=heads + 2),
        norm=NormSpec(kind="rmsnorm", bias=False, affine=False),
        layers=LayersSpec(encoder=c.int("num_hidden_layers"), decoder=0),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), dim=c.int("embedding_rank"),
                                  project_in_only=True, value_dim=kv * head_dim,
                                  patch_dim=3 * c.int("patch_size") ** 2, head="none"),
    )


def _activation(c: Config) -> str:
    """Its squared ReLU (transformers' ``relu2``, counted, not computed), or an activation
    hfconfig maps."""
    return "relu2" if c.data.get("hidden_act", "relu2") == "relu2" else c.act("hidden_act", "")


# MusicgenDecoderConfig's defaults (facebook/musicgen-small's decoder; MusicGen Melody's are
# the same)
MUSICGEN_DECODER = dict(vocab_size=2048, num_codebooks=4, max_position_embeddings=2048,
                        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        ffn_dim=4096)


def musicgen_spec(c: Config, family: str, cross: bool) -> ModelSpec:
    """MusicgenForCausalLM, MusicgenMelodyForCausalLM: the audio-token decoder without its text
    and audio encoders. Pre-norm layers (LayerNorms with bias) whose attention and FFN carry
    no biases, with cross (MusicGen, not Melody, which joins its conditions to the input)
    cross-attention to an encoder outside the model; sinusoidal positions (no parameters), a
    final LayerNorm; num_codebooks word tables (vocab_size + 1 rows) and as many heads."""
    c = _with_defaults(_decoder_keys(c), **MUSICGEN_DECODER)
    d = c.int("hidden_size")
    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings"),
        ffn=FfnSpec(d_ff=c.int("ffn_dim"), activation=c.act("activation_function", "gelu"),
                    bias=False),
        attention=AttentionSpec(heads=c.heads(d, kv_key=None)[0], qkv_bias=False,
                                out_bias=False),
        norm=NormSpec(final=True),
        layers=LayersSpec(encoder=0, decoder=c.int("num_hidden_layers"), cross=cross),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), codebooks=c.int("num_codebooks"),
                                  head="untied"),
    )


def _decoder_keys(c: Config) -> Config:
    """Where MusicGen's decoder keys are: the config's own when it holds them (a decoder's
    config, or the composite as its causal LM is given it: that class reads the top keys),
    else the composite's "decoder"."""
    decoder = c.mapping("decoder")
    if "hidden_size" in c.data or decoder is None:
        return c
    return Config(decoder, f"{c.source}: decoder")

