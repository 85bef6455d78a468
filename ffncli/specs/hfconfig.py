"""Hugging Face ``config.json`` -> ModelSpec, one small reader per model_type.

Missing keys take the reference class's defaults (``transformers`` configuration classes), so
a config that omits ``tie_word_embeddings`` counts the way the model loads: Gemma ties,
Llama does not.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ffncli.base import validate
from ffncli.base.textformats import read_json
from ffncli.base.validate import MAX_INT, Keys
from ffncli.errors import ConfigError
from ffncli.specs.renames import ATTRIBUTE_MAPS
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    HeadKind,
    LayerExtrasSpec,
    LayerKind,
    LayersSpec,
    LinearMixerSpec,
    Mamba2MixerSpec,
    MambaMixerSpec,
    ModelSpec,
    NormSpec,
)

# Hugging Face activation names -> ours.
_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
    "sigmoid": "sigmoid",
    "linear": "identity",
}


class Config(Keys):
    """A config.json's keys as its readers need them. Values are checked, never coerced:
    booleans are not numbers, 768.0 is not a whole number, a list is not a name, and whole
    numbers stop at 2**53.

    Both spellings of a key its model_type's transformers class renames (``attribute_map``:
    Qwen3-MoE reads ``num_experts``, transformers 5.25 writes ``num_local_experts``) are read
    as one key; an error names the spelling the file holds."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        renames = ATTRIBUTE_MAPS.get(data.get("model_type"), {})  # type: ignore[arg-type]
        both = {**{b: a for a, b in renames.items()}, **renames}
        filled = {key: other for key, other in both.items()
                  if data.get(key) is None and data.get(other) is not None}
        super().__init__({**data, **{key: data[other] for key, other in filled.items()}},
                         source)
        self.spelled = filled  # key read -> the spelling the file holds
        self.other = both

    def where(self, key: str) -> str:
        return super().where(self.spelled.get(key, key))

    def missing(self, key: str) -> ConfigError:
        other = f" (or '{self.other[key]}')" if key in self.other else ""
        return ConfigError(f"{self.source}: missing key '{key}'{other}")

    def int(self, key: str, default: int | None = None) -> int:
        """A whole number >= 1, required unless there is a ``default``."""
        return self.required(key) if default is None else self.whole(key) or default

    def bool(self, key: str, default: bool) -> bool:
        return self.flag(key, default)

    def act(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            raise self.fail(key, f"an activation name ({', '.join(_ACTIVATIONS)})")
        if value not in _ACTIVATIONS:
            raise ConfigError(
                f"{self.source}: key '{key}': unsupported activation {value!r}; supported: "
                f"{', '.join(_ACTIVATIONS)}"
            )
        return _ACTIVATIONS[value]

    def int0(self, key: str, default: builtins.int = 0) -> builtins.int:
        """A whole number that may be 0 (or null, meaning 0 when the key is present)."""
        if key in self.data and self.data[key] is None:
            return 0
        return validate.whole(self.where(key), self.data.get(key, default), 0,
                              error=ConfigError)

    def alias(self, keys: tuple[str, ...], default: builtins.int | None = None) -> builtins.int:
        """The first of several names a config may use for one size (``n_layer`` is also
        ``num_hidden_layers``); missing from all, the error names the first."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.int(key)
        return self.int(keys[0], default)

    def ints(self, key: str) -> list[builtins.int]:
        """A list of whole numbers >= 0 (layer indices), empty when absent or null."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT
                for v in value):
            raise self.fail(key, "a list of layer numbers")
        return value

    def at_most(self, key: str, value: builtins.int, limit_key: str,
                limit: builtins.int) -> builtins.int:
        if value > limit:
            raise self.fail(key, f"at most {limit_key} ({limit:,})")
        return value

    def heads(self, d: builtins.int, heads_key: str = "num_attention_heads",
              kv_key: str | None = "num_key_value_heads",
              head_dim: builtins.int | None = None, d_key: str = "hidden_size",
              default: builtins.int | None = None) -> tuple[builtins.int, builtins.int]:
        """(heads, kv_heads), checked: kv heads divide the heads, and without a head_dim the
        heads divide the width."""
        heads = self.int(heads_key, default)
        kv = self.int(kv_key, heads) if kv_key else heads
        if kv > heads or heads % kv:
            raise self.fail(kv_key or heads_key, f"a divisor of {heads_key} ({heads})")
        if head_dim is None and d % heads:
            raise self.fail(heads_key, f"a divisor of {d_key} ({d:,})")
        return heads, kv

    def head(self, tie_default: builtins.bool) -> HeadKind:
        return "tied" if self.bool("tie_word_embeddings", tie_default) else "untied"

    def name(self, default: str) -> str:
        """The model's name: ``_name_or_path`` when it is a non-empty string."""
        value = self.data.get("_name_or_path")
        if value is None or value == "":
            return default
        if not isinstance(value, str):
            raise self.fail("_name_or_path", "a string")
        return value


def _decoder_only(
    c: Config,
    family: str,
    *,
    ffn: FfnSpec,
    attention: AttentionSpec,
    norm: NormSpec,
    embeddings: EmbeddingsSpec,
    layers_key: str = "num_hidden_layers",
    d_key: str = "hidden_size",
    seq_key: str = "max_position_embeddings",
    seq_default: int = 2048,
) -> ModelSpec:
    return ModelSpec(
        name=c.name(family),
        family=family,
        description=f"from {c.source}",
        d_model=c.int(d_key),
        seq_len=c.int(seq_key, seq_default),
        ffn=ffn,
        attention=attention,
        norm=norm,
        layers=LayersSpec(encoder=0, decoder=c.int(layers_key)),
        embeddings=embeddings,
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


def bert_like_spec(c: Config, family: str, vocab_default: int = 30522, d_default: int = 768,
               d_ff_default: int = 3072) -> ModelSpec:
    """BERT, RoBERTa and XLM-RoBERTa, counted as BertModel / RobertaModel / XLMRobertaModel
    with their pooler. Each class has two token types unless the config says otherwise."""
    d = c.int("hidden_size", d_default)
    return ModelSpec(
        name=c.name(family),
        family="bert",
        description=f"from {c.source}",
        d_model=d,
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("intermediate_size", d_ff_default),
                    activation=c.act("hidden_act", "gelu")),
        attention=AttentionSpec(heads=c.heads(d, kv_key=None, default=12)[0]),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("num_hidden_layers", 12), decoder=0),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", vocab_default),
            positions=c.int("max_position_embeddings", 512),
            token_types=c.int0("type_vocab_size", 2),
            norm=True,
            head="none",
        ),
        pooler=True,
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


def t5_spec(c: Config) -> ModelSpec:
    """T5ForConditionalGeneration: v1.0 ("relu", tied) and v1.1 ("gated-gelu", untied)."""
    proj = c.data.get("feed_forward_proj", "relu")
    if not isinstance(proj, str):
        raise c.fail("feed_forward_proj", "a string such as 'relu' or 'gated-gelu'")
    gated = proj.startswith("gated-")
    act_name = proj.removeprefix("gated-")
    if gated and act_name == "gelu":
        act_name = "gelu_new"  # transformers runs "gated-gelu" with the tanh GELU
    if act_name not in _ACTIVATIONS:
        raise c.fail("feed_forward_proj", "'relu', 'gelu', 'gated-gelu' or 'gated-silu'")
    activation = _ACTIVATIONS[act_name]
    d = c.int("d_model", 512)
    layers = c.int("num_layers", 6)
    return ModelSpec(
        name=c.name("t5"),
        family="t5",
        description=f"from {c.source}",
        d_model=d,
        seq_len=512,
        ffn=FfnSpec(d_ff=c.int("d_ff", 2048), activation=activation, gated=gated, bias=False),
        attention=AttentionSpec(
            heads=c.int("num_heads", 8), head_dim=c.int("d_kv", 64), qkv_bias=False,
            out_bias=False, relative_buckets=c.int("relative_attention_num_buckets", 32),
        ),
        norm=NormSpec(kind="rmsnorm", bias=False, final=True),
        layers=LayersSpec(encoder=layers, decoder=c.int("num_decoder_layers", layers)),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 32128),
            head="tied" if c.bool("tie_word_embeddings", True) else "untied",
        ),
    )


# ---------------------------------------------------------------------------------------------
# Encoders and seq2seq, 2025-26 (issue 40). Each reader takes its class's defaults for the keys
# a config omits (transformers 5.25's config classes, tests/data/zoo/configs).


def _with_defaults(c: Config, **defaults: Any) -> Config:
    """The config, its missing (or null) keys at the class's defaults."""
    given = {k: v for k, v in c.data.items() if v is not None}
    return Config({**defaults, **given}, c.source)


def bert_relative_spec(c: Config, family: str, *, pooler: bool = True,
                       embedding_norm: bool = True, final_norm: bool = False,
                       position_offset: int = 0, **defaults: Any) -> ModelSpec:
    """BERT's relatives, counted as their bare model (AutoModel): BERT's layers, with or without
    the pooler, the embedding norm, a norm after the last layer (pre-norm encoders such as
    Megatron-BERT and XLM-RoBERTa-XL) and extra position rows (MRA and YOSO keep 2)."""
    spec = bert_like_spec(_with_defaults(c, **defaults), family)
    assert spec.embeddings is not None and spec.norm is not None  # bert_like_spec builds them
    return replace(spec, family=family, pooler=pooler,
                   norm=replace(spec.norm, final=final_norm),
                   embeddings=replace(spec.embeddings, norm=embedding_norm,
                                      position_offset=position_offset))


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


def rotary_bert_spec(c: Config, family: str, *, pooler: bool, gated: bool, bias: bool,
                     **defaults: Any) -> ModelSpec:
    """Post-norm BERT layers with rotary positions (no position table): Jina embeddings v3
    (BERT's FFN and biases, with pooler), NomicBERT (SwiGLU, no biases, no pooler)."""
    spec = bert_relative_spec(c, family, pooler=pooler, **defaults)
    assert spec.embeddings is not None and spec.attention is not None
    head_dim = c.whole("head_dim")
    if head_dim is not None and head_dim * spec.attention.heads != spec.d_model:
        raise c.fail("head_dim", f"hidden_size / num_attention_heads "
                     f"({spec.d_model // spec.attention.heads})")
    return replace(spec, ffn=replace(spec.ffn, gated=gated, bias=bias),
                   attention=replace(spec.attention, qkv_bias=bias, out_bias=bias),
                   embeddings=replace(spec.embeddings, positions=0))


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


def t5_variant_spec(c: Config, family: str, *, relative_per_layer: bool = False,
                    **defaults: Any) -> ModelSpec:
    """mT5, UMT5 (a relative-position bias table in every layer) and LongT5 with local
    attention: T5ForConditionalGeneration's shapes."""
    if family == "longt5" and c.data.get("encoder_attention_type", "local") != "local":
        raise c.fail("encoder_attention_type", "'local' (transient-global attention's tables "
                     "and norms are not read)")
    spec = t5_spec(_with_defaults(c, **defaults))
    assert spec.attention is not None
    return replace(spec, family=family, name=c.name(family), attention=replace(
        spec.attention, relative_per_layer=relative_per_layer))


def bart_like_spec(c: Config, family: str, *, positions: str, embedding_norm: bool,
                   final_norm: bool, d_key: str = "d_model", **defaults: Any) -> ModelSpec:
    """BART and its kin, as their ForConditionalGeneration class: one word table for both
    stacks (and the tied head), each stack its own position table and embedding norm.
    ``positions``: "learned" (BART: max_position_embeddings + 2 rows), "learned0" (Blenderbot:
    no offset), "sinusoidal" (Pegasus, Marian: a frozen table that is still a parameter),
    "buffer" (M2M-100, NLLB: none). final_logits_bias is a buffer."""
    c = _with_defaults(c, **defaults)
    d = c.int(d_key, 1024)
    heads = c.int("encoder_attention_heads", 16)
    for key, value in (("decoder_attention_heads", heads),
                       ("decoder_ffn_dim", c.int("encoder_ffn_dim", 4096))):
        if c.int(key, value) != value:
            raise c.fail(key, f"the encoder's value ({value:,}); stacks of different widths "
                         "are not read")
    if d % heads:
        raise c.fail("encoder_attention_heads", f"a divisor of {d_key} ({d:,})")
    seq = c.int("max_position_embeddings", 1024)
    rows = {"learned": seq, "learned0": seq, "sinusoidal": seq, "buffer": 0}[positions]
    vocab = c.int("vocab_size", 50265)
    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}", d_model=d,
        seq_len=seq,
        ffn=FfnSpec(d_ff=c.int("encoder_ffn_dim", 4096),
                    activation=c.act("activation_function", "gelu")),
        attention=AttentionSpec(heads=heads),
        norm=NormSpec(final=final_norm),
        layers=LayersSpec(encoder=c.int("encoder_layers", 12),
                          decoder=c.int("decoder_layers", 12)),
        embeddings=EmbeddingsSpec(vocab=vocab, positions=rows,
                                  position_offset=2 if positions == "learned" else 0,
                                  norm=embedding_norm, head=c.head(True), per_stack=True),
    )


def mvp_spec(c: Config) -> ModelSpec:
    """MvpForConditionalGeneration without prompts: BART's shapes (vocabulary 50267)."""
    if c.bool("use_prompt", False):
        raise c.fail("use_prompt", "false (the prompt tables are not read)")
    return bart_like_spec(c, "mvp", positions="learned", embedding_norm=True, final_norm=False,
                          vocab_size=50267)


def bigbird_pegasus_spec(c: Config) -> ModelSpec:
    """BigBirdPegasusForConditionalGeneration: Pegasus' layers with learned positions (no
    offset), attention biases only with use_bias; block-sparse attention has full attention's
    projections."""
    spec = bart_like_spec(c, "bigbird_pegasus", positions="learned0", embedding_norm=False,
                          final_norm=True, vocab_size=96103, max_position_embeddings=4096,
                          encoder_layers=16, decoder_layers=16,
                          activation_function="gelu_new")
    assert spec.attention is not None
    bias = c.bool("use_bias", False)
    return replace(spec, attention=replace(spec.attention, qkv_bias=bias, out_bias=bias))


def seamless_text_spec(c: Config, family: str) -> ModelSpec:
    """SeamlessM4T(v2)ForTextToText, the class of the seq2seq mapping: the text encoder and
    decoder (M2M-100's shapes, hidden_size wide); the speech encoder, text-to-unit model and
    vocoder of the whole model are not in it."""
    return bart_like_spec(c, family, positions="buffer", embedding_norm=False, final_norm=True,
                          d_key="hidden_size", vocab_size=256102, encoder_layers=24,
                          decoder_layers=24, encoder_ffn_dim=8192, decoder_ffn_dim=8192,
                          activation_function="relu")


def marian_spec(c: Config) -> ModelSpec:
    """MarianMTModel: BART's layers, sinusoidal tables (parameters), no embedding or final
    norms; one word table for both stacks, as share_encoder_decoder_embeddings says."""
    vocab = c.int("vocab_size", 58101)
    if not c.bool("share_encoder_decoder_embeddings", True):
        raise c.fail("share_encoder_decoder_embeddings", "true (separate decoder embeddings "
                     "are not read)")
    if c.int("decoder_vocab_size", vocab) != vocab:
        raise c.fail("decoder_vocab_size", f"vocab_size ({vocab:,})")
    return bart_like_spec(c, "marian", positions="sinusoidal", embedding_norm=False,
                          final_norm=False, vocab_size=58101)


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


_RMS = NormSpec(kind="rmsnorm", bias=False, final=True)


def gated_decoder_spec(
    c: Config,
    family: str,
    *,
    tie_default: bool = False,
    qkv_bias: bool | None = None,  # None: the config's attention_bias, on Q, K, V and O
    out_bias: bool | None = None,
    head_dim_default: int | None = None,  # None: hidden_size // num_attention_heads
    activation: str | None = None,
    norm: NormSpec = _RMS,
    qk_norm: str = "none",
    qk_norm_bias: bool = False,
    moe: Callable[[Config, int], tuple[FfnSpec, int]] | None = None,
    seq_default: int = 4096,
) -> ModelSpec:
    """The LLaMA shape most decoders share: a gated FFN, pre-norms, grouped-query attention.
    ``moe`` returns the mixture-of-experts FFN and how many layers keep the dense FFN."""
    d = c.int("hidden_size")
    head_dim = c.int("head_dim") if c.data.get("head_dim") is not None else head_dim_default
    heads, kv = c.heads(d, head_dim=head_dim)
    bias = c.bool("attention_bias", False)
    act = activation or c.act("hidden_act", "silu")
    layers = c.int("num_hidden_layers")
    routed, dense = moe(c, layers) if moe else (None, 0)
    dense_ffn = FfnSpec(d_ff=c.int("intermediate_size"), activation=act, gated=True,
                        bias=c.bool("mlp_bias", False)) if routed is None or dense else None
    ffn = routed or dense_ffn
    assert ffn is not None  # one of the two is built
    spec = _decoder_only(
        c, family,
        ffn=ffn,
        attention=AttentionSpec(
            heads=heads, kv_heads=kv, head_dim=head_dim,
            qkv_bias=bias if qkv_bias is None else qkv_bias,
            out_bias=bias if out_bias is None else out_bias,
            qk_norm=qk_norm, qk_norm_bias=qk_norm_bias,
        ),
        norm=norm,
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(tie_default)),
        seq_default=seq_default,
    )
    if not dense:
        return spec
    return replace(spec, layers=replace(spec.layers, dense=dense), dense_ffn=dense_ffn)


def _experts(c: Config, experts_key: str, d_ff_key: str, top_k_default: int | None = None,
             experts_default: int | None = None, **extra: Any) -> FfnSpec:
    """The routed experts: SwiGLU of d_ff_key each, top-k of experts_key, a router without
    bias; top-k more than the experts is an error naming the key."""
    experts = c.int(experts_key, experts_default)
    top_k = c.at_most("num_experts_per_tok", c.int("num_experts_per_tok", top_k_default),
                      experts_key, experts)
    return FfnSpec(d_ff=c.int(d_ff_key), activation=c.act("hidden_act", "silu"), gated=True,
                   bias=False, experts=experts, top_k=top_k, **extra)


def mixtral_moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
    return _experts(c, "num_local_experts", "intermediate_size", 2, experts_default=8), 0


def qwen_moe(c: Config, layers: int, shared: bool) -> tuple[FfnSpec, int]:
    """Qwen2-MoE and Qwen3-MoE: layer i is sparse unless listed in mlp_only_layers, and only
    when (i + 1) is a multiple of decoder_sparse_step; Qwen2-MoE adds a gated shared expert."""
    extra: dict[str, Any] = {}
    if shared:
        extra = dict(shared_d_ff=c.int("shared_expert_intermediate_size"), shared_gate=True)
    ffn = _experts(c, "num_experts", "moe_intermediate_size", **extra)
    step = c.int("decoder_sparse_step", 1)
    dense_only = set(c.ints("mlp_only_layers"))
    sparse = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    if sparse == 0:
        raise c.fail("mlp_only_layers", "at least one sparse layer (with decoder_sparse_step "
                      f"{step}, {layers} layers)")
    return ffn, layers - sparse


def _deepseek_moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
    """DeepSeek-V3: first_k_dense_replace dense layers, then routed experts and n_shared_experts
    shared ones, run as one FFN n_shared_experts x moe_intermediate_size wide. The router's
    e_score_correction_bias is a buffer, not a parameter."""
    d_ff = c.int("moe_intermediate_size")
    shared = c.int0("n_shared_experts", 1) * d_ff
    ffn = _experts(c, "n_routed_experts", "moe_intermediate_size", 8, shared_d_ff=shared)
    dense = c.at_most("first_k_dense_replace", c.int0("first_k_dense_replace", 3),
                      "num_hidden_layers", layers)
    if dense == layers:
        raise c.fail("first_k_dense_replace", f"fewer than num_hidden_layers ({layers})")
    return ffn, dense


def deepseek_v3_spec(c: Config, family: str = "deepseek_v3") -> ModelSpec:
    """DeepseekV3ForCausalLM: multi-head latent attention (queries through q_lora_rank, or
    straight when it is null; keys and values from a kv_lora_rank latent), mixture of experts.
    DeepSeek-V2 (``family`` deepseek_v2) is built alike; its class names no default top-k."""
    d = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    nope, rope = c.int("qk_nope_head_dim", 128), c.int("qk_rope_head_dim", 64)
    kv_rank = c.at_most("kv_lora_rank", c.int("kv_lora_rank", 512), "hidden_size", d)
    q_rank = c.at_most("q_lora_rank", c.int0("q_lora_rank", 1536), "hidden_size", d)
    if family != "deepseek_v3":
        c.int("num_experts_per_tok")  # required: null routes nowhere
    spec = gated_decoder_spec(c, family, moe=_deepseek_moe)
    bias = c.bool("attention_bias", False)
    attention = AttentionSpec(heads=heads, head_dim=nope + rope, qkv_bias=bias, out_bias=bias,
                              kv_lora_rank=kv_rank, q_lora_rank=q_rank, rope_head_dim=rope,
                              v_head_dim=c.int("v_head_dim", 128))
    return replace(spec, attention=attention)


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


# The first transformers whose GemmaMLP computes hidden_act: 4.48.0 (the "all attention
# refactor", commit 2c47618c, dropped the hidden_activation guard that 4.38.2 to 4.47.1 had;
# transformers 5 has no hidden_activation key at all, but writes one it was given).
GEMMA_HIDDEN_ACT_SINCE = (4, 48)


def transformers_version(c: Config) -> tuple[int, int] | None:
    """(major, minor) of the transformers that wrote the config, None when it does not say."""
    value = c.data.get("transformers_version")
    if value is None:
        return None
    m = re.match(r"(\d{1,6})\.(\d{1,6})(?:\D|$)", value) if isinstance(value, str) else None
    if m is None:
        raise c.fail("transformers_version", "a version such as 4.38.0")
    return int(m.group(1)), int(m.group(2))


def _gemma_act(c: Config, family: str) -> str:
    """Gemma's activation as the transformers that wrote the config computes it. Gemma 2 and 3
    read hidden_activation (default gelu_pytorch_tanh). Gemma 1: transformers older than
    4.48 read hidden_activation (gelu_pytorch_tanh when it is null, whatever hidden_act says);
    4.48 and later, and a config that names no version, read hidden_act. "gelu" is the tanh
    GELU the weights were trained with (Gemma 1.0's configs say "gelu" and mean it)."""
    if family != "gemma":
        key = "hidden_activation"
    else:
        version = transformers_version(c)
        old = version is not None and version < GEMMA_HIDDEN_ACT_SINCE
        key = "hidden_activation" if old else "hidden_act"
    if c.data.get(key) == "gelu":
        return "gelu_tanh"
    return c.act(key, "gelu_pytorch_tanh")


def llama_like(family: str, **options: Any) -> Callable[[Config], ModelSpec]:
    return lambda c: gated_decoder_spec(c, family, **options)


GEMMA2_NORM = NormSpec(kind="rmsnorm", bias=False, per_layer=4, final=True)
NO_AFFINE = NormSpec(kind="layernorm", bias=False, final=True, affine=False)
COHERE_NORM = NormSpec(kind="layernorm", bias=False, per_layer=1, final=True)


def gemma_spec(c: Config, family: str, **options: Any) -> ModelSpec:
    return gated_decoder_spec(c, family, tie_default=True, head_dim_default=256,
                          activation=_gemma_act(c, family), **options)


def read_config(path: Path) -> Any:
    """A config.json's document: a regular file of at most 4 MiB, strict JSON (no duplicate
    keys or nesting past 64 levels) but for the ``Infinity``, ``-Infinity`` and ``NaN`` that
    transformers writes into config files (Mamba-2's time_step_limit), read as those floats."""
    return read_json(path, "config file", ConfigError, constants=True)


# ---------------------------------------------------------------------------------------------
# 2025-26 decoders: per-layer patterns (layer_types, MoE steps), sinks, linear attention.

# transformers' layer_types -> our mixers (spec.MIXERS)
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
                "chunked_attention": "chunked", "linear_attention": "linear"}
_WINDOW_KEYS = {"sliding": "sliding_window", "chunked": "attention_chunk_size"}


def layer_mixers(c: Config, layers: int, default: str = "full_attention") -> list[str]:
    """Each decoder layer's mixer from ``layer_types`` (every layer ``default`` without it)."""
    value = c.data.get("layer_types")
    if value is None:
        value = [default] * layers
    if not isinstance(value, list) or len(value) != layers or not all(
            isinstance(v, str) and v in _LAYER_TYPES for v in value):
        raise c.fail("layer_types", f"a list of {layers} layer types "
                     f"({', '.join(_LAYER_TYPES)})")
    return [_LAYER_TYPES[v] for v in value]


def _window(c: Config, mixer: str) -> int:
    key = _WINDOW_KEYS.get(mixer)
    return c.int(key) if key else 0


def _kind_name(mixer: str, dense: bool) -> str:
    """``decoder``, ``sliding decoder``, ``dense decoder``, ``linear dense decoder``..."""
    return " ".join(p for p in ("" if mixer == "full" else mixer, "dense" if dense else "",
                                "decoder") if p)


def with_pattern(spec: ModelSpec, c: Config, mixers: list[str],
                 ffns: list[FfnSpec] | None = None,
                 attention: dict[str, AttentionSpec] | None = None,
                 mixer_spec: LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec | None = None,
                 shares_kv: list[bool] | None = None) -> ModelSpec:
    """The spec with one LayerKind per decoder layer: layer i mixes tokens by mixers[i] (its
    window read from the config), its FFN ffns[i] (default: the spec's; a dense FFN in a mixture
    of experts is named so), its attention ``attention[mixer]`` where given."""
    ffns = ffns or [spec.ffn] * len(mixers)
    shared = shares_kv or [False] * len(mixers)
    moe = any(f.is_moe for f in ffns)
    kinds = tuple(LayerKind(
        name=("kv-sharing " if kv else "") + _kind_name(m, moe and not f.is_moe), mixer=m,
        window=_window(c, m), attention=(attention or {}).get(m),
        ffn=None if f == spec.ffn else f, shares_kv=kv,
        mixer_spec=mixer_spec if m in ("linear", "mamba") else None)
        for m, f, kv in zip(mixers, ffns, shared, strict=True))
    if all(k == LayerKind() for k in kinds):
        return spec
    return replace(spec, pattern=kinds, layers=replace(spec.layers, dense=0), dense_ffn=None)


def _dense_ffn(c: Config, act: str | None = None, key: str = "intermediate_size") -> FfnSpec:
    return FfnSpec(d_ff=c.int(key), activation=act or c.act("hidden_act", "silu"), gated=True,
                   bias=c.bool("mlp_bias", False))


def patterned_decoder(family: str, **options: Any) -> Callable[[Config], ModelSpec]:
    """A LLaMA-shaped decoder whose layers' mixers follow ``layer_types`` (SmolLM3, and the
    sliding layers of Mistral-like models)."""
    def read(c: Config) -> ModelSpec:
        spec = gated_decoder_spec(c, family, **options)
        return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))
    return read


def gpt_oss_spec(c: Config) -> ModelSpec:
    """GptOssForCausalLM: attention with biases and per-head sinks, layers alternating between
    sliding-window and full attention (layer_types), every FFN a mixture of SwiGLU experts
    with biases (gate and up in one matrix) and a router with a bias."""
    spec = gated_decoder_spec(c, "gpt_oss", seq_default=131072)
    experts = _experts(c, "num_local_experts", "intermediate_size", 4, experts_default=128,
                       router_bias=True)
    spec = replace(spec, ffn=replace(experts, bias=True),
                   attention=replace(spec.attention, sinks=True) if spec.attention else None)
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def gemma3_text_spec(c: Config, family: str) -> ModelSpec:
    """Gemma 3's language model: Gemma 2's four norms a layer, a norm on Q and on K, layers
    sliding or full by layer_types."""
    spec = gemma_spec(c, family, norm=GEMMA2_NORM, qk_norm="head")
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def glm4_moe_spec(c: Config, family: str = "glm4_moe") -> ModelSpec:
    """Glm4MoeForCausalLM (GLM-4.5): grouped-query attention with biases on Q, K and V (never
    O) and optional norms on Q and K; DeepSeek-V3's mixture of experts (first_k_dense_replace
    dense layers, n_shared_experts shared ones, the score-correction bias a buffer). The
    multi-token-prediction layer (num_nextn_predict_layers) is not built by transformers.
    Without head_dim a head is hidden_size // num_attention_heads wide, rounded down."""
    floor = c.int("hidden_size") // c.int("num_attention_heads")
    return gated_decoder_spec(c, family, qkv_bias=c.bool("attention_bias", False),
                              head_dim_default=max(floor, 1),
                              out_bias=False, moe=_deepseek_moe,
                              qk_norm="head" if c.bool("use_qk_norm", False) else "none")


def minimax_m2_spec(c: Config) -> ModelSpec:
    """MiniMaxM2ForCausalLM: norms on all of Q and all of K (one weight per head and channel),
    every FFN a mixture of SwiGLU experts of intermediate_size, the router without bias (its
    score-correction bias is a buffer)."""
    return gated_decoder_spec(c, "minimax_m2", qk_norm="heads", seq_default=196608,
                              moe=lambda c, n: (_experts(c, "num_local_experts",
                                                         "intermediate_size", 8), 0))


def llama4_text_spec(c: Config) -> ModelSpec:
    """Llama4ForCausalLM: chunked and full attention by layer_types (its Q and K norm is an L2
    norm without weights), layers listed in moe_layers a mixture of experts of
    intermediate_size with one shared expert as wide (no gate), the others a dense FFN of
    intermediate_size_mlp."""
    spec = gated_decoder_spec(c, "llama4_text", seq_default=131072)
    experts = _experts(c, "num_local_experts", "intermediate_size", 1, experts_default=16,
                       shared_d_ff=c.int("intermediate_size"))
    n = spec.layers.decoder
    dense = _dense_ffn(c, key="intermediate_size_mlp")
    moe_layers = set(c.ints("moe_layers") or range(n))
    ffns = [experts if i in moe_layers else dense for i in range(n)]
    return with_pattern(replace(spec, ffn=experts), c, layer_mixers(c, n), ffns)


def qwen3_next_spec(c: Config, family: str = "qwen3_next", moe: bool = True) -> ModelSpec:
    """Qwen3NextForCausalLM: Gated DeltaNet linear attention and full attention by layer_types
    (full attention with a gate on each head's output and a norm on Q and K), Qwen2-MoE's
    mixture of experts (a gated shared expert) on the layers mlp_only_layers and
    decoder_sparse_step leave sparse, a dense FFN of intermediate_size on the others. Qwen 3.5
    is built alike (its linear attention's projections split, as many parameters), dense
    (qwen3_5_text) or every layer sparse (qwen3_5_moe_text)."""
    spec = gated_decoder_spec(c, family, qk_norm="head",
                              moe=(lambda c, n: qwen_moe(c, n, shared=True)) if moe else None)
    n = spec.layers.decoder
    step, dense_only = c.int("decoder_sparse_step", 1), set(c.ints("mlp_only_layers"))
    ffns = [spec.ffn if not moe or (i not in dense_only and (i + 1) % step == 0)
            else _dense_ffn(c) for i in range(n)]
    mixer = LinearMixerSpec(
        "gated_deltanet", k_heads=c.int("linear_num_key_heads"),
        v_heads=c.int("linear_num_value_heads"), k_head_dim=c.int("linear_key_head_dim"),
        v_head_dim=c.int("linear_value_head_dim"), conv_kernel=c.int("linear_conv_kernel_dim", 4))
    assert spec.attention is not None  # gated_decoder_spec always builds it
    spec = replace(spec, attention=replace(spec.attention, output_gate=True))
    return with_pattern(spec, c, layer_mixers(c, n), ffns, mixer_spec=mixer)


def patterned_gemma(family: str, **options: Any) -> Callable[[Config], ModelSpec]:
    """A Gemma whose layers follow layer_types (VaultGemma: two norms a layer)."""
    def read(c: Config) -> ModelSpec:
        spec = gemma_spec(c, family, **options)
        return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))
    return read


def ernie4_5_spec(c: Config) -> ModelSpec:
    """Ernie4_5ForCausalLM: use_bias on every projection of attention and FFN."""
    bias = c.bool("use_bias", False)
    spec = gated_decoder_spec(c, "ernie4_5", qkv_bias=bias, out_bias=bias)
    return replace(spec, ffn=replace(spec.ffn, bias=bias))


def granitemoe_spec(family: str) -> Callable[[Config], ModelSpec]:
    """GraniteMoe(Shared)ForCausalLM: Mixtral's experts behind a bias-free router, attention
    biases by attention_bias; GraniteMoeShared adds a shared expert of
    shared_intermediate_size (none when 0), without a gate."""
    def moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
        shared = c.int0("shared_intermediate_size", 0)
        return _experts(c, "num_local_experts", "intermediate_size", 2, experts_default=8,
                        shared_d_ff=shared), 0
    return lambda c: gated_decoder_spec(c, family, moe=moe)


def windowed(read: Callable[[Config], ModelSpec]) -> Callable[[Config], ModelSpec]:
    """A reader whose layers follow layer_types when the config has them (Gemma 2, Qwen2 and
    Qwen3 as transformers 5 writes them), else as Qwen2Config and Qwen3Config derive them (the
    layers from max_window_layers on slide, only with use_sliding_window), else all slide when
    sliding_window is set (Mistral, Mixtral), else all attend fully."""
    def windows(c: Config) -> ModelSpec:
        spec = read(c)
        n = spec.layers.decoder
        every = "sliding_attention" if c.data.get("sliding_window") is not None \
            and c.data.get("layer_types") is None else "full_attention"
        mixers = layer_mixers(c, n, every)
        if spec.family in _QWEN_WINDOWS and c.data.get("layer_types") is None:
            slide = c.bool("use_sliding_window", False) and every == "sliding_attention"
            first = c.int0("max_window_layers", 28)
            mixers = ["sliding" if slide and i >= first else "full" for i in range(n)]
        ffns = [k.ffn or spec.ffn for k in spec.decoder_kinds()]
        return with_pattern(spec, c, mixers, ffns)
    return windows


# Whose configs without layer_types slide by use_sliding_window and max_window_layers.
_QWEN_WINDOWS = ("qwen2", "qwen3")


def with_sinks(read: Callable[[Config], ModelSpec]) -> Callable[[Config], ModelSpec]:
    """A reader whose attention also has a learned sink logit per head (Granite SWA)."""
    def sinks(c: Config) -> ModelSpec:
        spec = read(c)
        assert spec.attention is not None  # the readers wrapped build attention
        spec = replace(spec, attention=replace(spec.attention, sinks=True))
        return replace(spec, pattern=tuple(replace(k, attention=None) for k in spec.pattern))
    return sinks


def routed(experts_key: str, top_k_default: int | None = None,
           experts_default: int | None = None) -> Callable[[Config, int], tuple[FfnSpec, int]]:
    """Every layer a mixture of SwiGLU experts of intermediate_size, no shared expert."""
    return lambda c, n: (_experts(c, experts_key, "intermediate_size", top_k_default,
                                  experts_default), 0)


def phimoe_spec(c: Config) -> ModelSpec:
    """PhimoeForCausalLM: Mixtral's experts behind LayerNorms with biases, an lm_head bias by
    lm_head_bias."""
    spec = gated_decoder_spec(c, "phimoe", moe=routed("num_local_experts", 2, 16),
                              norm=NormSpec(kind="layernorm", bias=True, final=True))
    assert spec.embeddings is not None  # gated_decoder_spec always builds them
    return replace(spec, embeddings=replace(spec.embeddings,
                                            head_bias=c.bool("lm_head_bias", False)))


def cohere2_moe_spec(c: Config) -> ModelSpec:
    """Cohere2MoeForCausalLM: Cohere 2's norms and windows, each layer a mixture of experts or
    a dense FFN of intermediate_size by mlp_layer_types ("sparse", "dense")."""
    spec = gated_decoder_spec(c, "cohere2_moe", tie_default=True, norm=COHERE_NORM,
                              moe=routed("num_experts", 2, 8))
    n = spec.layers.decoder
    kinds = c.data.get("mlp_layer_types") or ["sparse"] * n
    if not isinstance(kinds, list) or len(kinds) != n or not set(kinds) <= {"sparse", "dense"}:
        raise c.fail("mlp_layer_types", f"a list of {n} layer types (sparse, dense)")
    ffns = [spec.ffn if k == "sparse" else _dense_ffn(c) for k in kinds]
    return with_pattern(spec, c, layer_mixers(c, n), ffns)


def _dt_rank(c: Config, key: str, d: int) -> int:
    """Mamba's time-step rank: a number, or "auto": ceil(hidden_size / 16)."""
    return -(-d // 16) if c.data.get(key) == "auto" else c.int(key)


def mamba_spec(c: Config, family: str) -> ModelSpec:
    """MambaForCausalLM and FalconMambaForCausalLM: Mamba mixers, the head tied by default."""
    return _mamba_model(c, family, _mamba_mixer(c))


def mamba2_spec(c: Config) -> ModelSpec:
    """Mamba2ForCausalLM: every layer one RMSNorm and a Mamba-2 mixer (num_heads heads of
    head_dim, n_groups groups of B and C), no attention, no FFN; untied by default."""
    d = c.int("hidden_size")
    mixer = Mamba2MixerSpec(
        d_inner=c.int("expand", 2) * d, d_state=c.int("state_size", 128),
        heads=c.int("num_heads", 128), groups=c.int("n_groups", 8),
        conv_kernel=c.int("conv_kernel", 4), conv_bias=c.bool("use_conv_bias", True),
        proj_bias=c.bool("use_bias", False))
    return _mamba_model(c, "mamba2", mixer, tie_default=False)


def _mamba_mixer(c: Config) -> MambaMixerSpec:
    d = c.int("hidden_size")
    return MambaMixerSpec(
        d_inner=c.int("intermediate_size", c.int("expand", 2) * d),
        d_state=c.int("state_size", 16), dt_rank=_dt_rank(c, "time_step_rank", d),
        conv_kernel=c.int("conv_kernel", 4), conv_bias=c.bool("use_conv_bias", True),
        proj_bias=c.bool("use_bias", False))


def _mamba_model(c: Config, family: str, mixer: MambaMixerSpec | Mamba2MixerSpec,
                 tie_default: bool = True) -> ModelSpec:
    """A state-space model: every layer one RMSNorm and a mixer, no attention and no FFN; a
    final norm."""
    d, n = c.int("hidden_size"), c.int("num_hidden_layers")
    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings", 2048),
        ffn=FfnSpec(d_ff=mixer.d_inner, activation=c.act("hidden_act", "silu")),
        norm=NormSpec(kind="rmsnorm", bias=False, per_layer=1, final=True),
        layers=LayersSpec(encoder=0, decoder=n),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(tie_default)),
        pattern=(LayerKind("mamba decoder", mixer="mamba", mixer_spec=mixer,
                           has_ffn=False),) * n)


def jamba_spec(c: Config) -> ModelSpec:
    """JambaForCausalLM: attention on layers attn_layer_offset mod attn_layer_period, a Mamba
    mixer (with norms on dt, B and C) on the others; a mixture of experts on layers
    expert_layer_offset mod expert_layer_period, a dense FFN on the others."""
    spec = gated_decoder_spec(c, "jamba", moe=routed("num_experts", 2, 16),
                              seq_default=262144)
    d, n = spec.d_model, spec.layers.decoder
    mixer = MambaMixerSpec(
        d_inner=c.int("mamba_expand", 2) * d, d_state=c.int("mamba_d_state", 16),
        dt_rank=_dt_rank(c, "mamba_dt_rank", d), conv_kernel=c.int("mamba_d_conv", 4),
        conv_bias=c.bool("mamba_conv_bias", True), proj_bias=c.bool("mamba_proj_bias", False),
        bc_dt_norms=True)
    attn = (c.int("attn_layer_period", 8), c.int0("attn_layer_offset", 4))
    experts = (c.int("expert_layer_period", 2), c.int0("expert_layer_offset", 1))
    mixers = ["full" if i % attn[0] == attn[1] else "mamba" for i in range(n)]
    ffns = [spec.ffn if i % experts[0] == experts[1] else _dense_ffn(c) for i in range(n)]
    return replace(with_pattern(spec, c, mixers, ffns, mixer_spec=mixer))


def ernie4_5_moe_spec(c: Config) -> ModelSpec:
    """Ernie4_5_MoeForCausalLM: use_bias on attention, dense FFNs and the head; layer i a
    mixture of experts when (i + 1) is a multiple of moe_layer_interval and i lies within
    moe_layer_start_index..moe_layer_end_index, a dense FFN of intermediate_size otherwise. Its
    router's score-correction bias is a parameter (one per expert), counted as a router bias;
    moe_num_shared_experts shared experts run as one FFN that much wider, without a gate."""
    bias = c.bool("use_bias", False)
    shared = c.int0("moe_num_shared_experts", 0) * c.int("moe_intermediate_size")
    experts = _experts(c, "num_experts", "moe_intermediate_size", 2, router_bias=True,
                       shared_d_ff=shared)
    spec = gated_decoder_spec(c, "ernie4_5_moe", tie_default=True, qkv_bias=bias,
                              out_bias=bias, moe=lambda c, n: (experts, 0))
    n = spec.layers.decoder
    step = c.int("moe_layer_interval", 1)
    first, last = c.int0("moe_layer_start_index", 0), c.int0("moe_layer_end_index", n - 1)
    dense = replace(_dense_ffn(c), bias=bias)
    ffns = [experts if (i + 1) % step == 0 and first <= i <= last else dense
            for i in range(n)]
    assert spec.embeddings is not None  # gated_decoder_spec always builds them
    spec = replace(spec, embeddings=replace(spec.embeddings, head_bias=bias))
    return with_pattern(spec, c, layer_mixers(c, n), ffns)


def afmoe_spec(c: Config) -> ModelSpec:
    """AfmoeForCausalLM (Arcee): a gate on each head's output, norms on Q and K, four norms a
    layer, layers sliding or full by layer_types; num_dense_layers dense first layers, then
    experts of moe_intermediate_size with num_shared_experts shared ones (one FFN that much
    wider) and a per-expert bias on the routing scores (a parameter, counted as a router
    bias)."""
    def moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
        shared = c.int0("num_shared_experts", 0) * c.int("moe_intermediate_size")
        dense = c.at_most("num_dense_layers", c.int0("num_dense_layers", 0),
                          "num_hidden_layers", layers)
        return _experts(c, "num_experts", "moe_intermediate_size", 6, router_bias=True,
                        shared_d_ff=shared), dense
    spec = gated_decoder_spec(c, "afmoe", qk_norm="head", norm=GEMMA2_NORM, moe=moe)
    assert spec.attention is not None  # gated_decoder_spec always builds it
    spec = replace(spec, attention=replace(spec.attention, output_gate=True))
    ffns = [k.ffn or spec.ffn for k in spec.decoder_kinds()]
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder), ffns)


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


def lfm2_ffn_width(c: Config) -> int:
    """LFM2's FFN width: with block_auto_adjust_ff_dim, 2/3 of intermediate_size (rounded
    down), times block_ffn_dim_multiplier (rounded down) and rounded up to block_multiple_of."""
    width = c.int("intermediate_size")
    if not c.bool("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    if c.data.get("block_ffn_dim_multiplier") is not None:
        width = int(c.number("block_ffn_dim_multiplier") * width)
        multiple = c.int("block_multiple_of", 256)
        width = multiple * -(-width // multiple)
    return width


def lfm2_spec(c: Config) -> ModelSpec:
    """Lfm2ForCausalLM with attention layers (its short-convolution layers, "conv" in
    layer_types, are refused by name): norms on Q and K, the FFN width of lfm2_ffn_width."""
    spec = gated_decoder_spec(c, "lfm2", tie_default=True, qk_norm="head",
                              seq_default=128000)
    spec = replace(spec, ffn=replace(spec.ffn, d_ff=lfm2_ffn_width(c)))
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))
