"""NeoMME (issue 40): a multimodal encoder counted as its bare model: a squared-ReLU FFN,
gated attention output, value embeddings and an image patch embedder."""

from __future__ import annotations

from ffncli.specs.hfconfig import Config
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
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
