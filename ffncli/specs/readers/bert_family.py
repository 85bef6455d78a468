"""The encoders of BERT's line, as their bare model (AutoModel): BERT, RoBERTa and their
relatives, ELECTRA, DistilBERT, DeBERTa-v2, MPNet, ModernBERT, XLM, and LLaMA-shaped encoders.
The table also names the kit's :func:`~ffncli.specs.hfconfig.bert_like_spec` (BERT, RoBERTa,
XLM-RoBERTa), :func:`~ffncli.specs.hfconfig.bert_relative_spec` and
:func:`~ffncli.specs.hfconfig.rotary_bert_spec` here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.base.validate import MAX_INT
from ffncli.specs.hfconfig import (
    Config,
    _with_defaults,
    bert_like_spec,
    bert_relative_spec,
    gated_decoder_spec,
)
from ffncli.specs.hfconfig import rotary_bert_spec as rotary_bert_spec  # Jina, NomicBERT
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def electra_spec(c: Config) -> ModelSpec:
    """ElectraModel (the discriminator's body, no pooler): BERT's encoder behind word, position
    and token-type tables embedding_size wide, their LayerNorm, then a projection to
    hidden_size when it differs."""
    spec = bert_like_spec(c, "electra", d_default=256, d_ff_default=1024)
    dim = c.int("embedding_size", 128)
    assert spec.embeddings is not None  # bert_like_spec always builds them
    embeddings = replace(spec.embeddings, dim=dim if dim != spec.d_model else None,
                         factorized=True)
    return replace(spec, family="electra", embeddings=embeddings, pooler=False)


def distilbert_spec(c: Config) -> ModelSpec:
    """DistilBertModel: no token types, no pooler. Sinusoidal positions are still a parameter
    (frozen, but saved in the checkpoint and listed by ``parameters()``), so they count."""
    c.bool("sinusoidal_pos_embds", False)  # checked; either way the table is a parameter
    d = c.int("dim", 768)
    return ModelSpec(
        name=c.name("distilbert"),
        family="distilbert",
        description=f"from {c.source}",
        d_model=d,
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("hidden_dim", 3072), activation=c.act("activation", "gelu")),
        attention=AttentionSpec(heads=c.heads(d, "n_heads", None, d_key="dim",
                                              default=12)[0]),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("n_layers", 6), decoder=0),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 30522),
            positions=c.int("max_position_embeddings", 512),
            norm=True,
            head="none",
        ),
    )


def ernie_spec(c: Config) -> ModelSpec:
    """ErnieModel: BERT, and with use_task_id a task-type table (task_type_vocab_size rows),
    counted with the token-type rows."""
    spec = bert_relative_spec(c, "ernie")
    assert spec.embeddings is not None
    tasks = c.int("task_type_vocab_size", 3) if c.bool("use_task_id", False) else 0
    return replace(spec, embeddings=replace(spec.embeddings,
                                            token_types=spec.embeddings.token_types + tasks))


def big_bird_spec(c: Config) -> ModelSpec:
    """BigBirdModel: BERT with 4096 positions; Q, K and V biases only with use_bias
    (block-sparse attention has full attention's projections)."""
    spec = bert_relative_spec(c, "big_bird", vocab_size=50358, max_position_embeddings=4096,
                              hidden_act="gelu_new")
    assert spec.attention is not None
    return replace(spec, attention=replace(spec.attention, qkv_bias=c.bool("use_bias", True)))


def yoso_spec(c: Config) -> ModelSpec:
    """YosoModel: BERT without pooler, 2 extra position rows, one token type."""
    if c.data.get("conv_window") is not None:
        raise c.fail("conv_window", "null (the convolution on the values is not read)")
    return bert_relative_spec(c, "yoso", pooler=False, position_offset=2, vocab_size=50265,
                              max_position_embeddings=4096, type_vocab_size=1)


def tapas_spec(c: Config) -> ModelSpec:
    """TapasModel: BERT with seven token-type tables (type_vocab_sizes), all d_model wide."""
    sizes = c.data.get("type_vocab_sizes")
    sizes = [3, 256, 256, 2, 256, 256, 10] if sizes is None else sizes
    if not isinstance(sizes, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_INT for n in sizes):
        raise c.fail("type_vocab_sizes", "a list of table sizes")
    spec = bert_relative_spec(c, "tapas", max_position_embeddings=1024)
    assert spec.embeddings is not None
    return replace(spec, embeddings=replace(spec.embeddings, token_types=sum(sizes)))


def layoutlm_spec(c: Config) -> ModelSpec:
    """LayoutLMModel: BERT plus four 2-D position tables (x, y, height, width) of
    max_2d_position_embeddings rows each, counted with the position rows."""
    spec = bert_relative_spec(c, "layoutlm")
    assert spec.embeddings is not None
    rows = 4 * c.int("max_2d_position_embeddings", 1024)
    return replace(spec, embeddings=replace(spec.embeddings, position_offset=rows))



def rembert_spec(c: Config) -> ModelSpec:
    """RemBertModel: ELECTRA's embeddings (input_embedding_size wide, then a projection with
    bias) and BERT's pooler; the output embedding (output_embedding_size) is the LM head's."""
    c = _with_defaults(c, hidden_size=1152, intermediate_size=4608, num_attention_heads=18,
                       num_hidden_layers=32, vocab_size=250300)
    spec = bert_relative_spec(c, "rembert")
    assert spec.embeddings is not None
    dim = c.int("input_embedding_size", 256)
    return replace(spec, embeddings=replace(spec.embeddings, dim=dim if dim != spec.d_model
                                            else None, factorized=True))


def mpnet_spec(c: Config) -> ModelSpec:
    """MPNetModel: BERT's layers and pooler, no token types, one relative-position bias table
    (relative_attention_num_buckets x heads) shared by every layer."""
    spec = bert_relative_spec(c, "mpnet", vocab_size=30527, type_vocab_size=0)
    assert spec.attention is not None and spec.embeddings is not None
    buckets = c.int("relative_attention_num_buckets", 32)
    return replace(spec, attention=replace(spec.attention, relative_buckets=buckets),
                   embeddings=replace(spec.embeddings, token_types=0))


def _signed(c: Config, key: str, default: int) -> int:
    """A whole number that may be negative or 0 (DeBERTa's -1: "not set")."""
    value = c.data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_INT:
        raise c.fail(key, "a whole number")
    return value


def deberta_v2_spec(c: Config) -> ModelSpec:
    """DebertaV2Model (DeBERTa-v2 and v3): BERT's layers without pooler; absolute positions only
    with position_biased_input; with relative_attention one table of relative positions
    (2 x position_buckets rows, else 2 x max_relative_positions) shared by every layer, and its
    LayerNorm when norm_rel_ebd says layer_norm."""
    c = _with_defaults(c, hidden_size=1536, intermediate_size=6144, num_attention_heads=24,
                       num_hidden_layers=24, vocab_size=128100, type_vocab_size=0)
    spec = bert_relative_spec(c, "deberta-v2", pooler=False)
    assert spec.embeddings is not None
    if c.data.get("embedding_size", spec.d_model) != spec.d_model:
        raise c.fail("embedding_size", f"hidden_size ({spec.d_model:,}); an embedding "
                     "projection is not read")
    if c.whole("conv_kernel_size", 0, 0):
        raise c.fail("conv_kernel_size", "0 (the convolution beside the first layer is not "
                     "read)")
    relative = 0
    norms = c.data.get("norm_rel_ebd", "none")
    if not isinstance(norms, str):
        raise c.fail("norm_rel_ebd", "a string such as 'layer_norm'")
    if c.bool("relative_attention", False):
        if not c.bool("share_att_key", False) and c.data.get("pos_att_type"):
            raise c.fail("share_att_key", "true (the separate position projections of "
                         "pos_att_type are not read)")
        buckets = _signed(c, "position_buckets", -1)
        span = _signed(c, "max_relative_positions", -1)
        relative = 2 * (buckets if buckets > 0 else span if span > 0 else spec.seq_len)
    positions = spec.embeddings.positions if c.bool("position_biased_input", True) else 0
    return replace(spec, embeddings=replace(
        spec.embeddings, positions=positions, relative=relative,
        relative_norm=bool(relative) and "layer_norm" in norms.lower().split("|")))


def modernbert_spec(c: Config) -> ModelSpec:
    """ModernBertModel: fused Wqkv and GeGLU Wi, rotary positions, LayerNorms with bias only
    with norm_bias, a final norm. Its first layer has no attention norm (the embedding norm
    stands in for it): that norm is counted as the first layer's, not as an embedding norm."""
    c = _with_defaults(c, intermediate_size=1152, num_hidden_layers=22, vocab_size=50368,
                       max_position_embeddings=8192)
    d = c.int("hidden_size", 768)
    attention_bias, mlp_bias = c.bool("attention_bias", False), c.bool("mlp_bias", False)
    return ModelSpec(
        name=c.name("modernbert"), family="modernbert", description=f"from {c.source}",
        d_model=d, seq_len=c.int("max_position_embeddings"),
        ffn=FfnSpec(d_ff=c.int("intermediate_size"), activation=c.act("hidden_activation",
                                                                      "gelu"),
                    gated=True, bias=mlp_bias),
        attention=AttentionSpec(heads=c.heads(d, kv_key=None, default=12)[0],
                                qkv_bias=attention_bias, out_bias=attention_bias),
        norm=NormSpec(bias=c.bool("norm_bias", False), final=True),
        layers=LayersSpec(encoder=c.int("num_hidden_layers"), decoder=0),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head="none"),
    )


def encoder_gated_spec(c: Config, family: str, **defaults: Any) -> ModelSpec:
    """EuroBertModel, UltraBertModel: LLaMA's layers (gated FFN, RMSNorms, grouped-query
    attention) as an encoder, no head."""
    spec = gated_decoder_spec(_with_defaults(c, **defaults), family)
    assert spec.embeddings is not None
    return replace(spec, layers=LayersSpec(encoder=spec.layers.decoder, decoder=0),
                   embeddings=replace(spec.embeddings, head="none"))


def xlm_spec(c: Config, family: str) -> ModelSpec:
    """XLMModel, FlaubertModel: post-norm layers of emb_dim with a 4 x emb_dim FFN (GELU, or
    ReLU without gelu_activation), learned positions (sinusoidal ones are a frozen parameter
    too), an embedding norm, no token types; with n_langs > 1 and use_lang_emb a language
    table (n_langs rows), counted with the token-type rows. Pre-norm FlauBERT holds the same."""
    d = c.int("emb_dim", 2048)
    langs = c.int("n_langs", 1)
    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=4 * d, activation="gelu" if c.bool("gelu_activation", True)
                    else "relu"),
        attention=AttentionSpec(heads=c.heads(d, "n_heads", None, d_key="emb_dim",
                                              default=16)[0]),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("n_layers", 12), decoder=0),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 30145), positions=c.int("max_position_embeddings", 512),
            token_types=langs if langs > 1 and c.bool("use_lang_emb", True) else 0, norm=True,
            head="none"),
    )


def esm_spec(c: Config) -> ModelSpec:
    """EsmModel (ESM-1b, ESM-2; counted as the bare model, as BERT is): BERT's layers with
    their norms before attention and FFN (alike in parameters), a LayerNorm after the last
    (emb_layer_norm_after), one on the embeddings only with emb_layer_norm_before; no token
    types; a position table only with position_embedding_type "absolute" (ESM-2's "rotary"
    has none); BERT's pooler and a contact head on every layer's attention maps. vocab_size has
    no default (EsmConfig's is null)."""
    kind = c.data.get("position_embedding_type", "absolute")
    if kind not in ("absolute", "rotary"):
        raise c.fail("position_embedding_type", "'absolute' or 'rotary'")
    c.int("vocab_size")  # required
    spec = bert_relative_spec(c, "esm", embedding_norm=c.bool("emb_layer_norm_before", False),
                              final_norm=True, max_position_embeddings=1026)
    assert spec.embeddings is not None
    positions = spec.embeddings.positions if kind == "absolute" else 0
    return replace(spec, contact_head=True, embeddings=replace(
        spec.embeddings, token_types=0, positions=positions))

