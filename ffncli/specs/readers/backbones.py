"""Text backbones of issue 40 counted as transformers' causal-LM class builds them: Whisper's
decoder alone."""

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
    seq = c.int("max_target_positions")
    return ModelSpec(
        name=c.name("whisper"), family="whisper", description=f"from {c.source}",
        d_model=c.int("d_model"), seq_len=seq,
        ffn=FfnSpec(d_ff=c.int("decoder_ffn_dim"),
                    activation=c.act("activation_function", "gelu")),
        attention=AttentionSpec(heads=c.int("decoder_attention_heads"), key_bias=False),
        norm=NormSpec(final=True),
        layers=LayersSpec(encoder=0, decoder=c.int("decoder_layers"), cross=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), positions=seq, head=c.head(True)),
    )
