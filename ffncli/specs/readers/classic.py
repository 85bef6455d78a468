"""Older and odd decoders (issue 40): GPT-Neo, CodeGen, the first GPT, XGLM, BioGPT, CTRL,
GPT-NeoX-Japanese; and the LLaMA-shaped decoders whose FFN is an up and a down projection
around a squared ReLU (Arcee, Jais 2, NanoChat, Persimmon and Fuyu's language model) or around
xIELU, whose two learned scalars per FFN are parameters (Apertus); BitNet's sub-norms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.errors import ConfigError
from ffncli.specs.archs import _multimodal  # archs imports this module only to read a config
from ffncli.specs.config import ACTIVATIONS
from ffncli.specs.hfconfig import (
    Config,
    _decoder_only,
    _with_defaults,
    gated_decoder_spec,
    layer_mixers,
    windowed,
    with_pattern,
)
from ffncli.specs.readers.gpt_family import gpt2_spec, gptj_spec
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    ModelSpec,
    NormSpec,
)

# Activations these readers take besides those hfconfig maps (the engine does not compute them:
# their rows in ffncli.specs.archs say so). Their names are transformers' (ACT2FN).
COUNTED_ACTIVATIONS = ("relu2", "xielu")


def activation(c: Config, key: str = "hidden_act", default: str = "relu2") -> str:
    """The FFN's activation: a squared ReLU (``relu2``), xIELU, or one hfconfig maps."""
    value = c.data.get(key, default)
    if value in COUNTED_ACTIVATIONS:
        return str(value)
    if isinstance(value, str) and value not in ACTIVATIONS:
        raise ConfigError(f"{c.source}: key '{key}': unsupported activation {value!r}; "
                          f"supported: {', '.join((*ACTIVATIONS, *COUNTED_ACTIVATIONS))}")
    return c.act(key, default)


def up_down_spec(c: Config, family: str, **options: Any) -> ModelSpec:
    """The LLaMA shape with an FFN of two projections, up then down, no gate: Arcee and
    NanoChat (squared ReLU), Apertus (xIELU; norms on Q and K), Jais 2 (LayerNorms and biases
    everywhere)."""
    spec = gated_decoder_spec(c, family, activation=activation(c), **options)
    return replace(spec, ffn=replace(spec.ffn, gated=False))


def bitnet_spec(c: Config) -> ModelSpec:
    """BitNetForCausalLM: LLaMA's layers with a squared-ReLU gated FFN and two sub-norms, one on
    attention's output before W_O, one on the FFN's hidden layer."""
    spec = gated_decoder_spec(c, "bitnet", activation=activation(c))
    assert spec.norm is not None  # gated_decoder_spec always builds it
    return replace(spec, norm=replace(spec.norm, sub_norms=True))


def persimmon_spec(c: Config, family: str = "persimmon") -> ModelSpec:
    """PersimmonForCausalLM: LayerNorms with biases, fused Q, K and V with biases, with
    qk_layernorm a LayerNorm (with bias) of head_dim on Q and on K; an up and a down projection
    with biases around a squared ReLU; untied head."""
    d = c.int("hidden_size")
    heads = c.heads(d, kv_key=None)[0]
    return _decoder_only(
        c, family,
        ffn=FfnSpec(d_ff=c.int("intermediate_size"), activation=activation(c)),
        attention=AttentionSpec(heads=heads, qk_norm="head" if c.bool("qk_layernorm", True)
                                else "none", qk_norm_bias=True),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(False)),
        seq_default=16384,
    )


def fuyu_spec(c: Config) -> ModelSpec:
    """FuyuForCausalLM: Persimmon's language model (text_config); its patch projection
    (patch_size^2 x num_channels -> hidden_size, a linear layer with bias) named as not
    counted."""
    spec = _multimodal(c, "persimmon")
    patch = c.int("patch_size", 30) ** 2 * c.int("num_channels", 3)
    return replace(spec, uncounted=(
        f"image patch projection ({patch:,} -> {spec.d_model:,}, with bias)",))


def gpt_neo_spec(c: Config) -> ModelSpec:
    """GPTNeoForCausalLM: GPT-2's layers with Q, K and V without biases (W_O with one), an
    FFN of intermediate_size (4 x hidden_size when null); its local layers attend a window but
    transformers caches every token, so they count as full attention."""
    d = c.int("hidden_size", 2048)
    heads = c.heads(d, "num_heads", None, default=16)[0]
    return _decoder_only(
        c, "gpt_neo",
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 4 * d),
                    activation=c.act("activation_function", "gelu_new")),
        attention=AttentionSpec(heads=heads, qkv_bias=False),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 50257),
                                  positions=c.int("max_position_embeddings", 2048),
                                  head=c.head(True)),
        layers_key="num_layers",
    )


def codegen_spec(c: Config) -> ModelSpec:
    """CodeGenForCausalLM: GPT-J's shapes (one fused Q, K, V without biases, attention and FFN
    in parallel behind one LayerNorm, an untied head with a bias)."""
    return replace(gptj_spec(c), family="codegen", name=c.name("codegen"))


def openai_gpt_spec(c: Config) -> ModelSpec:
    """OpenAIGPTLMHeadModel: GPT-2's shapes with post-norms (no final norm), the activation
    in afn, 512 positions."""
    spec = gpt2_spec(c)
    assert spec.norm is not None and spec.embeddings is not None  # gpt2_spec builds them
    return replace(spec, family="openai-gpt", name=c.name("openai-gpt"),
                   ffn=replace(spec.ffn, activation=c.act("afn", "gelu")),
                   norm=replace(spec.norm, final=False),
                   seq_len=c.int("n_positions", 512),
                   embeddings=replace(spec.embeddings, vocab=c.int("vocab_size", 40478),
                                      positions=c.int("n_positions", 512)))


def fairseq_decoder_spec(c: Config, family: str, *, positions: int, d_key: str,
                         layers_key: str, heads_key: str, ffn_key: str,
                         act_key: str) -> ModelSpec:
    """fairseq's decoder-only models: BART's decoder layers without cross-attention (biases
    everywhere, two LayerNorms), a final LayerNorm, a tied head. XGLM's positions are
    sinusoidal (a buffer, ``positions`` 0); BioGPT's learned, with 2 extra rows."""
    d = c.int(d_key)
    return _decoder_only(
        c, family,
        ffn=FfnSpec(d_ff=c.int(ffn_key), activation=c.act(act_key, "gelu")),
        attention=AttentionSpec(heads=c.heads(d, heads_key, None, d_key=d_key)[0]),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), positions=positions,
                                  position_offset=2 if positions else 0, head=c.head(True)),
        layers_key=layers_key, d_key=d_key,
    )


def xglm_spec(c: Config) -> ModelSpec:
    return fairseq_decoder_spec(c, "xglm", positions=0, d_key="d_model",
                                layers_key="num_layers", heads_key="attention_heads",
                                ffn_key="ffn_dim", act_key="activation_function")


def biogpt_spec(c: Config) -> ModelSpec:
    return fairseq_decoder_spec(c, "biogpt", positions=c.int("max_position_embeddings", 1024),
                                d_key="hidden_size", layers_key="num_hidden_layers",
                                heads_key="num_attention_heads", ffn_key="intermediate_size",
                                act_key="hidden_act")


def ctrl_spec(c: Config) -> ModelSpec:
    """CTRLLMHeadModel: sinusoidal positions (a buffer), pre-norm layers with biases on every
    projection, a ReLU FFN of dff, a final LayerNorm; the head tied, with a bias."""
    d = c.int("n_embd", 1280)
    return _decoder_only(
        c, "ctrl",
        ffn=FfnSpec(d_ff=c.int("dff", 8192)),
        attention=AttentionSpec(heads=c.heads(d, "n_head", None, d_key="n_embd",
                                              default=16)[0]),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 246534), head=c.head(True),
                                  head_bias=True),
        layers_key="n_layer", d_key="n_embd", seq_key="n_positions", seq_default=256,
    )


def gpt_neox_japanese_spec(c: Config) -> ModelSpec:
    """GPTNeoXJapaneseForCausalLM: fused Q, K, V and W_O without biases, W_O's bias in the last
    layer alone; an FFN of hidden_size x intermediate_multiple_size without biases; a tied
    head."""
    d = c.int("hidden_size", 2560)
    heads = c.heads(d, kv_key=None, default=32)[0]
    width = int(d * c.number("intermediate_multiple_size", 4))
    spec = _decoder_only(
        c, "gpt_neox_japanese",
        ffn=FfnSpec(d_ff=max(width, 1), activation=c.act("hidden_act", "gelu"), bias=False),
        attention=AttentionSpec(heads=heads, qkv_bias=False, out_bias=False),
        norm=NormSpec(final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 32000), head=c.head(True)),
    )
    assert spec.attention is not None
    last = LayerKind("last decoder", attention=replace(spec.attention, out_bias=True))
    return replace(spec, pattern=(LayerKind(),) * (spec.layers.decoder - 1) + (last,))


def diffllama_spec(c: Config) -> ModelSpec:
    """DiffLlamaForCausalLM: LLaMA's layers with differential attention, whose four lambda
    vectors of head_dim are parameters of each layer (its group norm has no weights)."""
    spec = gated_decoder_spec(c, "diffllama")
    assert spec.attention is not None  # gated_decoder_spec always builds it
    return replace(spec, attention=replace(spec.attention, differential=True))


def modernbert_decoder_spec(c: Config) -> ModelSpec:
    """ModernBertDecoderForCausalLM: ModernBERT's layers (GeGLU Wi, LayerNorms with bias by
    norm_bias, biases by attention_bias and mlp_bias), sliding or full by layer_types (by
    default full every global_attn_every_n_layers), a window of sliding_window (transformers
    writes local_attention // 2); the first layer has no attention norm, the embedding norm
    stands in for it (counted as the first layer's, as for ``modernbert``); the prediction
    head (a layer with a bias by classifier_bias, and a norm), then the tied decoder with a bias
    by decoder_bias."""
    c = _with_defaults(c, hidden_size=768, intermediate_size=1152, num_attention_heads=12,
                       num_hidden_layers=22, vocab_size=50368, max_position_embeddings=8192)
    d, n = c.int("hidden_size"), c.int("num_hidden_layers")
    attention_bias, mlp_bias = c.bool("attention_bias", False), c.bool("mlp_bias", False)
    every = c.int("global_attn_every_n_layers", 3)
    window = c.whole("sliding_window") or c.int("local_attention", 128) // 2
    c = Config({**c.data, "sliding_window": max(window, 1), "layer_types": c.data.get(
        "layer_types") or ["sliding_attention" if i % every else "full_attention"
                           for i in range(n)]}, c.source)
    spec = _decoder_only(
        c, "modernbert-decoder",
        ffn=FfnSpec(d_ff=c.int("intermediate_size"),
                    activation=c.act("hidden_activation", "gelu"), gated=True, bias=mlp_bias),
        attention=AttentionSpec(heads=c.heads(d, kv_key=None)[0], qkv_bias=attention_bias,
                                out_bias=attention_bias),
        norm=NormSpec(bias=c.bool("norm_bias", False), final=True),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(True),
                                  head_bias=c.bool("decoder_bias", True), head_transform=True,
                                  head_transform_bias=c.bool("classifier_bias", False)),
    )
    return with_pattern(spec, c, layer_mixers(c, n))


def doge_spec(c: Config) -> ModelSpec:
    """DogeForCausalLM, dense (its cross-domain mixture of experts, is_moe, is refused): LLaMA's
    layers with norms on Q and K, the dynamic mask's dt_proj and A, and a learned scale on each
    residual; every layer slides when sliding_window is set."""
    return windowed(_doge)(c)


def _doge(c: Config) -> ModelSpec:
    if c.bool("is_moe", False):
        raise c.fail("is_moe", "false (Doge's cross-domain mixture of experts is not read)")
    spec = gated_decoder_spec(c, "doge", qk_norm="head")
    assert spec.attention is not None and spec.norm is not None  # always built
    return replace(spec, attention=replace(spec.attention, dynamic_mask=True),
                   norm=replace(spec.norm, residual_scales=True))


def xlnet_spec(c: Config) -> ModelSpec:
    """XLNetLMHeadModel: post-norm layers (two LayerNorms with bias) of Q, K, V and O without
    biases, XLNet's relative attention's parts, an FFN of d_inner with biases; the word table, the
    mask embedding, no final norm; the head tied, with a bias."""
    d = c.int("d_model", 1024)
    heads = c.heads(d, "n_head", None, d_key="d_model", default=16)[0]
    return _decoder_only(
        c, "xlnet",
        ffn=FfnSpec(d_ff=c.int("d_inner", 4096), activation=c.act("ff_activation", "gelu")),
        attention=AttentionSpec(heads=heads, head_dim=c.int("d_head", d // heads),
                                qkv_bias=False, out_bias=False, xl_relative=True),
        norm=NormSpec(final=False),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 32000), head=c.head(True),
                                  head_bias=True, mask=True),
        layers_key="n_layer", d_key="d_model", seq_default=512,
    )
