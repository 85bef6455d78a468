"""Hugging Face ``config.json`` -> ModelSpec, one small reader per model_type.

Missing keys take the reference class's defaults (``transformers`` configuration classes), so
a config that omits ``tie_word_embeddings`` counts the way the model loads: Gemma ties,
Llama does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ffncli.errors import ConfigError
from ffncli.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
    check_spec,
    read_text,
)
from ffncli import validate
from ffncli.textformats import Malformed, parse_json
from ffncli.validate import brief, suggest

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


class _Config:
    """Typed access to one config's keys, with errors that name the file and the key. Values
    are checked, never coerced: booleans are not numbers, 768.0 is not a whole number, a list
    is not a name, and whole numbers stop at 2**53."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        self.data, self.source = data, source

    def where(self, key: str) -> str:
        return f"{self.source}: key '{key}'"

    def error(self, key: str, expected: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}: expected {expected}, got "
                           f"{brief(self.data.get(key))}")

    def int(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.source}: missing key '{key}'")
            return default
        return validate.whole(self.where(key), value, error=ConfigError)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        return validate.flag(self.where(key), value, error=ConfigError)

    def act(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            raise self.error(key, f"an activation name ({', '.join(_ACTIVATIONS)})")
        if value not in _ACTIVATIONS:
            raise ConfigError(
                f"{self.source}: key '{key}': unsupported activation {value!r}; supported: "
                f"{', '.join(_ACTIVATIONS)}"
            )
        return _ACTIVATIONS[value]

    def name(self, default: str) -> str:
        """The model's name: ``_name_or_path`` when it is a non-empty string."""
        value = self.data.get("_name_or_path")
        if value is None or value == "":
            return default
        if not isinstance(value, str):
            raise self.error("_name_or_path", "a string")
        return value


def _decoder_only(
    c: _Config,
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


def _gpt2(c: _Config) -> ModelSpec:
    d = c.int("n_embd", 768)
    return _decoder_only(
        c, "gpt2",
        ffn=FfnSpec(d_ff=c.int("n_inner", 4 * d), activation=c.act("activation_function", "gelu_new")),
        attention=AttentionSpec(heads=c.int("n_head", 12)),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 50257), positions=c.int("n_positions", 1024),
            head="tied" if c.bool("tie_word_embeddings", True) else "untied",
        ),
        layers_key="n_layer", d_key="n_embd", seq_key="n_positions", seq_default=1024,
    )


def _bert_like(c: _Config, family: str, token_types_default: int) -> ModelSpec:
    """BERT and RoBERTa, counted as BertModel / RobertaModel with their pooler."""
    return ModelSpec(
        name=c.name(family),
        family="bert",
        description=f"from {c.source}",
        d_model=c.int("hidden_size", 768),
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 3072), activation=c.act("hidden_act", "gelu")),
        attention=AttentionSpec(heads=c.int("num_attention_heads", 12)),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("num_hidden_layers", 12), decoder=0),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 30522),
            positions=c.int("max_position_embeddings", 512),
            token_types=c.int("type_vocab_size", token_types_default),
            norm=True,
            head="none",
        ),
        pooler=True,
    )


def _distilbert(c: _Config) -> ModelSpec:
    """DistilBertModel: no token types, no pooler; sinusoidal positions are frozen."""
    sinusoidal = c.bool("sinusoidal_pos_embds", False)
    return ModelSpec(
        name=c.name("distilbert"),
        family="distilbert",
        description=f"from {c.source}",
        d_model=c.int("dim", 768),
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("hidden_dim", 3072), activation=c.act("activation", "gelu")),
        attention=AttentionSpec(heads=c.int("n_heads", 12)),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("n_layers", 6), decoder=0),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 30522),
            positions=0 if sinusoidal else c.int("max_position_embeddings", 512),
            norm=True,
            head="none",
        ),
    )


def _t5(c: _Config) -> ModelSpec:
    """T5ForConditionalGeneration: v1.0 ("relu", tied) and v1.1 ("gated-gelu", untied)."""
    proj = c.data.get("feed_forward_proj", "relu")
    if not isinstance(proj, str):
        raise c.error("feed_forward_proj", "a string such as 'relu' or 'gated-gelu'")
    gated = proj.startswith("gated-")
    act_name = proj.removeprefix("gated-")
    if gated and act_name == "gelu":
        act_name = "gelu_new"  # transformers runs "gated-gelu" with the tanh GELU
    if act_name not in _ACTIVATIONS:
        raise c.error("feed_forward_proj", "'relu', 'gelu', 'gated-gelu' or 'gated-silu'")
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


def _opt(c: _Config) -> ModelSpec:
    d = c.int("hidden_size", 768)
    bias = c.bool("enable_bias", True)
    pre_norm = c.bool("do_layer_norm_before", True)
    final = pre_norm and not c.bool("_remove_final_layer_norm", False)
    proj_dim = c.int("word_embed_proj_dim", d)
    return _decoder_only(
        c, "opt",
        ffn=FfnSpec(d_ff=c.int("ffn_dim", 3072), activation=c.act("activation_function", "relu"),
                    bias=bias),
        attention=AttentionSpec(heads=c.int("num_attention_heads", 12), qkv_bias=bias,
                                out_bias=bias),
        norm=NormSpec(final=final),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 50272), dim=proj_dim if proj_dim != d else None,
            positions=c.int("max_position_embeddings", 2048), position_offset=2,
            head="tied" if c.bool("tie_word_embeddings", True) else "untied",
        ),
    )


def _gpt_neox(c: _Config) -> ModelSpec:
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


def _phi(c: _Config) -> ModelSpec:
    """PhiForCausalLM: parallel attention and FFN behind one LayerNorm; lm_head has a bias."""
    heads = c.int("num_attention_heads", 32)
    return _decoder_only(
        c, "phi",
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 8192), activation=c.act("hidden_act",
                                                                             "gelu_new")),
        attention=AttentionSpec(heads=heads, kv_heads=c.int("num_key_value_heads", heads)),
        norm=NormSpec(per_layer=1, final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size", 51200),
            head="tied" if c.bool("tie_word_embeddings", False) else "untied", head_bias=True,
        ),
    )


def _llama_like(c: _Config, family: str, *, tie_default: bool, qkv_bias_default: bool,
                act_key: str = "hidden_act", default_act: str = "silu") -> ModelSpec:
    """LLaMA, Mistral, Mixtral, Qwen2, Gemma: gated FFN, RMSNorm, grouped-query attention."""
    heads = c.int("num_attention_heads")
    head_dim = c.data.get("head_dim")
    if head_dim is not None:
        head_dim = c.int("head_dim")
    attention_bias = c.bool("attention_bias", qkv_bias_default)
    experts = c.int("num_local_experts", 1) if family == "mixtral" else 1
    top_k = c.int("num_experts_per_tok", 2) if family == "mixtral" else 1
    activation = c.act(act_key, default_act)
    return _decoder_only(
        c, family,
        ffn=FfnSpec(d_ff=c.int("intermediate_size"), activation=activation, gated=True,
                    bias=c.bool("mlp_bias", False), experts=experts, top_k=top_k),
        attention=AttentionSpec(
            heads=heads, kv_heads=c.int("num_key_value_heads", heads), head_dim=head_dim,
            qkv_bias=attention_bias, out_bias=c.bool("attention_bias", False)
            if family != "qwen2" else False,
        ),
        norm=NormSpec(kind="rmsnorm", bias=False, final=True),
        embeddings=EmbeddingsSpec(
            vocab=c.int("vocab_size"),
            head="tied" if c.bool("tie_word_embeddings", tie_default) else "untied",
        ),
        seq_default=4096,
    )


_READERS: dict[str, Callable[[_Config], ModelSpec]] = {
    "gpt2": _gpt2,
    "bert": lambda c: _bert_like(c, "bert", 2),
    "roberta": lambda c: _bert_like(c, "roberta", 1),
    "distilbert": _distilbert,
    "t5": _t5,
    "opt": _opt,
    "gpt_neox": _gpt_neox,
    "llama": lambda c: _llama_like(c, "llama", tie_default=False, qkv_bias_default=False),
    "mistral": lambda c: _llama_like(c, "mistral", tie_default=False, qkv_bias_default=False),
    "mixtral": lambda c: _llama_like(c, "mixtral", tie_default=False, qkv_bias_default=False),
    "qwen2": lambda c: _llama_like(c, "qwen2", tie_default=False, qkv_bias_default=True),
    # Gemma runs the tanh GELU even where an old config says "gelu" (hidden_act is ignored).
    "gemma": lambda c: _llama_like(c, "gemma", tie_default=True, qkv_bias_default=False,
                                   act_key="hidden_activation", default_act="gelu_pytorch_tanh"),
    "phi": _phi,
}

SUPPORTED_MODEL_TYPES = tuple(_READERS)


def spec_from_config(data: Any, source: str) -> ModelSpec:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError(f"{source}: missing key 'model_type'; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if not isinstance(model_type, str):
        raise ConfigError(f"{source}: key 'model_type': expected a string such as 'llama', got "
                          f"{brief(model_type)}")
    reader = _READERS.get(model_type)
    if reader is None:
        raise ConfigError(
            f"{source}: unsupported model_type {brief(model_type)}"
            f"{suggest(str(model_type), SUPPORTED_MODEL_TYPES)}; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return check_spec(reader(_Config(data, source)), source)


def load_config(path: Path) -> ModelSpec:
    """A config.json: a regular file of at most 4 MiB, strict JSON (no duplicate keys, NaN,
    Infinity or nesting past 64 levels), then :func:`spec_from_config`."""
    text = read_text(path, "config file", ConfigError)
    try:
        data = parse_json(text)
    except Malformed as exc:
        raise ConfigError(f"{path}: invalid JSON{exc.where}: {exc.problem}") from None
    return spec_from_config(data, str(path))
