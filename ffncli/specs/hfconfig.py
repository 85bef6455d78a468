"""Hugging Face ``config.json`` -> ModelSpec: the kit the readers of model families
(:mod:`ffncli.specs.readers`, one module per family) build from.

Missing keys take the reference class's defaults (``transformers`` configuration classes), so
a config that omits ``tie_word_embeddings`` counts the way the model loads: Gemma ties,
Llama does not. The shapes several families share are here: the decoder-only model, BERT's,
T5's and BART's, the LLaMA-shaped gated decoder and its mixtures of experts, Gemma's
activation, per-layer patterns (``layer_types``), windows and sinks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ffncli.specs.config import ACTIVATIONS
from ffncli.specs.config import Config as Config
from ffncli.specs.config import read_config as read_config
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    ModelSpec,
    NormSpec,
)

if TYPE_CHECKING:  # built by the readers of the families that have them
    from ffncli.specs.layers import LinearMixerSpec, Mamba2MixerSpec, MambaMixerSpec


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


def t5_spec(c: Config) -> ModelSpec:
    """T5ForConditionalGeneration: v1.0 ("relu", tied) and v1.1 ("gated-gelu", untied)."""
    proj = c.data.get("feed_forward_proj", "relu")
    if not isinstance(proj, str):
        raise c.fail("feed_forward_proj", "a string such as 'relu' or 'gated-gelu'")
    gated = proj.startswith("gated-")
    act_name = proj.removeprefix("gated-")
    if gated and act_name == "gelu":
        act_name = "gelu_new"  # transformers runs "gated-gelu" with the tanh GELU
    if act_name not in ACTIVATIONS:
        raise c.fail("feed_forward_proj", "'relu', 'gelu', 'gated-gelu' or 'gated-silu'")
    activation = ACTIVATIONS[act_name]
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
# Each reader takes its class's defaults for the keys a config omits (transformers 5.25's config
# classes, tests/data/zoo/configs).


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


def same_stacks(c: Config, d: int, d_key: str, heads_key: str = "{}_attention_heads") -> int:
    """An encoder-decoder's heads, read once: the decoder's heads and FFN width are the
    encoder's (stacks of different widths are not read), and the heads divide d.
    ``heads_key``: the heads' key with {} for the stack (ProphetNet's num_{}_attention_heads)."""
    encoder = heads_key.format("encoder")
    heads = c.int(encoder, 16)
    for key, value in ((heads_key.format("decoder"), heads),
                       ("decoder_ffn_dim", c.int("encoder_ffn_dim", 4096))):
        if c.int(key, value) != value:
            raise c.fail(key, f"the encoder's value ({value:,}); stacks of different widths "
                         "are not read")
    if d % heads:
        raise c.fail(encoder, f"a divisor of {d_key} ({d:,})")
    return heads


def bart_like_spec(c: Config, family: str, *, positions: str, embedding_norm: bool,
                   final_norm: bool, d_key: str = "d_model", **defaults: Any) -> ModelSpec:
    """BART and its kin, as their ForConditionalGeneration class: one word table for both
    stacks (and the tied head), each stack its own position table and embedding norm.
    ``positions``: "learned" (BART: max_position_embeddings + 2 rows), "learned0" (Blenderbot:
    no offset), "sinusoidal" (Pegasus, Marian: a frozen table that is still a parameter),
    "buffer" (M2M-100, NLLB: none). final_logits_bias is a buffer."""
    c = _with_defaults(c, **defaults)
    d = c.int(d_key, 1024)
    heads = same_stacks(c, d, d_key)
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


def qwen_moe(c: Config, layers: int, shared: bool) -> tuple[FfnSpec, int]:
    """Qwen2-MoE and Qwen3-MoE: layer i is sparse unless listed in mlp_only_layers, and only
    when (i + 1) is a multiple of decoder_sparse_step; Qwen2-MoE adds a gated shared expert."""
    extra: dict[str, Any] = {}
    if shared:
        extra = dict(shared_d_ff=c.int("shared_expert_intermediate_size"), shared_gate=True)
    ffn = _experts(c, "num_experts", "moe_intermediate_size", **extra)
    sparse = sum(qwen_sparse_layers(c, layers))
    if sparse == 0:
        raise c.fail("mlp_only_layers", "at least one sparse layer (with decoder_sparse_step "
                      f"{c.int('decoder_sparse_step', 1)}, {layers} layers)")
    return ffn, layers - sparse


def qwen_sparse_layers(c: Config, layers: int) -> list[bool]:
    """Whether each layer of a Qwen MoE is sparse: not in mlp_only_layers, (i + 1) a multiple of
    decoder_sparse_step."""
    step = c.int("decoder_sparse_step", 1)
    dense_only = set(c.ints("mlp_only_layers"))
    return [i not in dense_only and (i + 1) % step == 0 for i in range(layers)]


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


# ---------------------------------------------------------------------------------------------
# Per-layer patterns (layer_types, MoE steps), windows and sinks.

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
