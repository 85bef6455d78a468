"""Typed, frozen model specs, validated once; built-in YAML presets.

A spec describes an architecture, not weights: widths, the FFN's activation and gating, the
attention's heads, the norms, the layer stacks and the embeddings. ``counting`` turns it into
parameter counts; ``ffn`` and ``weights`` turn its FFN part into a function.

This module must not import NumPy: ``ffncli params`` is integer arithmetic and starts fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base import record, validate
from ffncli.base.validate import suggest
from ffncli.errors import SpecError
from ffncli.specs.rules import ACTIVATIONS, GLU_VARIANTS, build
from ffncli.specs.sections import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    InitSpec,
    LayersSpec,
    NormSpec,
)

if TYPE_CHECKING:  # built by config readers only: off a preset's start-up
    from ffncli.specs.layers import (
        BottleneckSpec,
        CcaSpec,
        CompressorSpec,
        LatentSpec,
        LayerExtrasSpec,
        LinearMixerSpec,
        LoopsSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        SharedBlockSpec,
        ShortConvSpec,
        SideConvSpec,
    )

# A decoder layer's token mixer: full causal attention; attention over a sliding window of
# ``window`` tokens (Mistral, Gemma 2/3, gpt-oss); over chunks of ``window`` tokens (Llama 4);
# a linear-attention or state-space block with a fixed state instead of a KV cache (Gated
# DeltaNet, Mamba: ``LayerKind.mixer_spec``); none at all.
MIXERS = ("full", "sliding", "chunked", "linear", "mamba", "conv", "none")


@record
class LayerKind:
    """One kind of decoder layer, as data: its token mixer and its FFN. ``ModelSpec.pattern``
    lists the kind of every decoder layer in order; layers of equal kinds are counted
    together, under ``name``."""

    name: str = "decoder"  # what ``params`` calls these layers
    mixer: str = "full"  # one of MIXERS
    window: int = 0  # sliding: the window; chunked: the chunk (tokens)
    attention: AttentionSpec | None = None  # None: the spec's attention
    mixer_spec: (LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec | ShortConvSpec
                 | SideConvSpec | CcaSpec | CompressorSpec | None) = None
    ffn: FfnSpec | None = None  # None: the spec's FFN
    has_ffn: bool = True  # False: no FFN in these layers (a mixer-only layer)
    shares_kv: bool = False  # reads another layer's KV cache and keeps none (Gemma 3n)
    attentions: int = 1  # attention sublayers in each layer, each its own KV (LongCat-Flash: 2)
    norms: int | None = None  # norms of d_model in each layer (None: the spec's norm.per_layer)
    gated_norms: int = 0  # of those, how many gate their output by x -> norm_gate_rank -> x
    norm_gate_rank: int = 0  # (A.X-K2's GatedRMSNorm: two bias-free projections, d x rank x d)
    shared: SharedBlockSpec | None = None  # issue 40, hybrids: Zamba's shared block, beside mixer
    # issue 40: times each of these layers' weights run a token (Dory's recurrent
    # loops, HRM-Text's cycles), each run a KV cache layer of its own (ModelSpec.loops numbers them)
    runs: int = 1


@record
class ModelSpec:
    """A model's architecture: its sections, the kind of each layer, what is not counted."""

    name: str
    d_model: int
    ffn: FfnSpec
    family: str = "custom"
    description: str = ""
    attention: AttentionSpec | None = None
    norm: NormSpec | None = None
    layers: LayersSpec = field(default_factory=LayersSpec)
    embeddings: EmbeddingsSpec | None = None
    pooler: bool = False
    seq_len: int = 1024
    dense_ffn: FfnSpec | None = None  # the FFN of the layers.dense layers of a MoE model
    init: InitSpec = field(default_factory=InitSpec)
    # Per-layer heterogeneity (issue 40): the kind of each decoder layer, in order; empty, the
    # layers.dense first layers with dense_ffn, then the others with ffn. Not a preset key yet.
    pattern: tuple[LayerKind, ...] = ()
    # What a multimodal config holds that is not counted (its vision or audio tower): the count
    # is the language model's alone, and says so.
    uncounted: tuple[str, ...] = ()
    extras: LayerExtrasSpec | None = None  # Gemma 3n's AltUp, LAuReL and per-layer inputs
    hyper_streams: int = 0  # hyper-connections over this many copies of the stream (HY-V4)
    hyper_rank: int = 0  # > 0, Qwen4-Exp's gated residuals of this rank instead
    encoder_pattern: tuple[LayerKind, ...] = ()  # the kind of each encoder layer (as pattern)
    latents: LatentSpec | None = None  # Perceiver's latent array and its cross-attention
    bottleneck: BottleneckSpec | None = None  # MobileBERT's bottlenecks and embeddings
    loops: LoopsSpec | None = None  # issue 40: layers run several times (LayerKind.runs)
    # ESM: a logistic regression on every layer's attention maps (layers x heads -> 1,
    # with a bias), beside the pooler
    contact_head: bool = False
    # DeepSeek-V4's hyper-connections also mix the streams (an n x n comb of each):
    # fn ((2 + n) n x n d), base ((2 + n) n) and three scales, not HY-V4's 2n and two
    hyper_mixing: bool = False
    # issue 40: learned query rows of d_model outside the layers (Inkling 2's last
    # attention residual, its loop's message queries)
    residual_queries: int = 0

    @property
    def ffn_only(self) -> bool:
        return self.attention is None and self.embeddings is None and self.norm is None

    @property
    def d_ff(self) -> int:
        return self.ffn.d_ff

    def decoder_kinds(self) -> tuple[LayerKind, ...]:
        """The kind of each decoder layer: the pattern, else layers.dense dense layers (their
        FFN dense_ffn) then the others."""
        if self.pattern:
            return self.pattern
        dense = self.layers.dense if self.dense_ffn is not None else 0
        return ((LayerKind("dense decoder", ffn=self.dense_ffn),) * dense
                + (LayerKind(),) * (self.layers.decoder - dense))


# ---------------------------------------------------------------------------------------------
# Validation: one place, one message format ("<source>: <key>: expected ..., got ..."): each
# key by specs/rules.py, the rules across keys here.

_SECTIONS: dict[str, type] = {
    "ffn": FfnSpec,
    "attention": AttentionSpec,
    "norm": NormSpec,
    "layers": LayersSpec,
    "embeddings": EmbeddingsSpec,
    "init": InitSpec,
    "dense_ffn": FfnSpec,
}

# Issue 40's encoder and seq2seq parts (each a field of one section), which only the config
# readers fill: not keys of a YAML spec.
ENCODER_PARTS = frozenset({
    "down_bias", "groups", "stack", "adapters", "adapter_d_ff",
    "key_bias", "query_bias", "xl_relative", "extra_projections", "span_conv",
    "relative_projection", "value_conv", "qkv_groups", "out_groups", "shared_qk",
    "shared", "cross", "merged_cross",
    "position_dim", "decoder_positions", "decoder_vocab", "project", "extra_rows",
    "head_transform", "axial", "side_tables", "entities", "entity_dim",
    "final_bias", "final_width",
    # JetMoE's mixture of attention heads and its experts' output bias
    "output_bias", "head_experts", "head_top_k", "prompt_tokens", "learned_scalars",
    "project_in_only", "value_dim", "patch_dim",
    # ZAYA's router MLP and its state, its affine residuals
    "router_mlp", "router_states", "residual_affine",
    # Dory's scales on the FFN's hidden and on the logits
    "hidden_scales", "head_scale",
    "codebooks",  # MusicGen's word tables and heads, one a codebook
    # DeepSeek-V4's grouped low-rank output projection
    "o_groups", "o_lora_rank",
    # Inkling 2's unpadded head
    "head_vocab",
    # Qwen4-Exp's QSA indexer
    "qsa_heads", "qsa_head_dim",
})

# Spec fields only the config readers fill (per-layer kinds, what a config leaves uncounted).
NOT_PRESET_KEYS = frozenset({"pattern", "uncounted", "extras", "hyper_streams",
                             "encoder_pattern", "latents", "bottleneck", "channel_mix",
                             "router_shared", "head_transform_bias",
                             "routed", "loops", "runs", "contact_head",
                             "hyper_mixing", "residual_queries", "hyper_rank"}) | ENCODER_PARTS


def check_spec(spec: ModelSpec, source: str) -> ModelSpec:
    """Cross-field rules a single key cannot express. Returns the spec unchanged."""
    ffn = spec.ffn
    if ffn.top_k > ffn.experts:
        raise SpecError(
            f"{source}: key 'ffn.top_k': expected at most ffn.experts ({ffn.experts}), "
            f"got {ffn.top_k}"
        )
    if ffn.capacity_factor is not None and not ffn.is_moe:
        raise SpecError(f"{source}: key 'ffn.capacity_factor': only a mixture of experts "
                        "(ffn.experts > 1) has a capacity")
    att = spec.attention
    if att is not None:
        kv = att.kv_heads or att.heads
        if att.heads % kv:
            raise SpecError(
                f"{source}: key 'attention.kv_heads': expected a divisor of attention.heads "
                f"({att.heads}), got {kv}"
            )
        if att.head_dim is None and spec.d_model % att.heads:
            raise SpecError(
                f"{source}: key 'attention.heads': d_model {spec.d_model} is not divisible by "
                f"{att.heads} heads; give attention.head_dim"
            )
    if spec.layers.encoder == 0 and spec.layers.decoder == 0:
        raise SpecError(f"{source}: key 'layers': expected at least one encoder or decoder layer")
    _validate_additions(spec, source)
    return spec


def _validate_additions(spec: ModelSpec, source: str) -> None:
    """Rules of the keys added for issue 12: shared experts, dense layers, latent attention."""
    for key, ffn in (("ffn", spec.ffn), ("dense_ffn", spec.dense_ffn)):
        if ffn is not None:
            _check_shared_expert(ffn, key, source)
    _check_layers(spec, source)
    if spec.attention is not None:
        _check_latent(spec.attention, spec.d_model, source)
        _check_latent_parts(spec.attention, source)


def _check_shared_expert(ffn: FfnSpec, key: str, source: str) -> None:
    """A shared expert (and its gate) belongs to a mixture of experts."""
    if (ffn.shared_d_ff or ffn.shared_gate) and not ffn.is_moe:
        raise SpecError(f"{source}: key '{key}.shared_d_ff': only a mixture of experts "
                        f"({key}.experts > 1) has a shared expert")
    if ffn.expert_norm and not ffn.is_moe:
        raise SpecError(f"{source}: key '{key}.expert_norm': only a mixture of experts "
                        f"({key}.experts > 1) has expert norms")
    if ffn.shared_gate and not ffn.shared_d_ff:
        raise SpecError(f"{source}: key '{key}.shared_gate': needs a shared expert "
                        f"({key}.shared_d_ff > 0)")
    if ffn.router_scales and not ffn.is_moe:
        raise SpecError(f"{source}: key '{key}.router_scales': only a mixture of experts "
                        f"({key}.experts > 1) has a router")


def _check_layers(spec: ModelSpec, source: str) -> None:
    """The dense layers and the layer pattern fit the decoder's layers."""
    layers = spec.layers
    if layers.dense > layers.decoder:
        raise SpecError(f"{source}: key 'layers.dense': expected at most layers.decoder "
                        f"({layers.decoder}), got {layers.dense}")
    if spec.pattern and len(spec.pattern) != layers.decoder:
        raise SpecError(f"{source}: the layer pattern names {len(spec.pattern)} layers, "
                        f"layers.decoder is {layers.decoder}")
    if layers.shared and layers.encoder % layers.shared:
        raise SpecError(f"{source}: key 'layers.shared': expected a divisor of layers.encoder "
                        f"({layers.encoder}), got {layers.shared}")
    if spec.encoder_pattern and len(spec.encoder_pattern) != layers.encoder:
        raise SpecError(f"{source}: the encoder's layer pattern names "
                        f"{len(spec.encoder_pattern)} layers, layers.encoder is {layers.encoder}")
    if layers.dense and spec.dense_ffn is None:
        raise SpecError(f"{source}: key 'dense_ffn': layers.dense ({layers.dense}) needs the "
                        "dense layers' FFN")


def _check_latent(att: AttentionSpec, d_model: int, source: str) -> None:
    """Latent attention's keys: its head widths and ranks, and no latent keys without it."""
    if not att.kv_lora_rank:  # DeepSeek-V4 (o_groups): W_Q through q_lora_rank, no latent
        if (att.q_lora_rank and not att.o_groups) or att.rope_head_dim:
            raise SpecError(f"{source}: key 'attention.kv_lora_rank': q_lora_rank and "
                            "rope_head_dim belong to latent attention (kv_lora_rank > 0)")
        return
    if att.head_dim is None or att.rope_head_dim >= att.head_dim:
        raise SpecError(f"{source}: key 'attention.rope_head_dim': latent attention needs "
                        "attention.head_dim (nope + rope) larger than rope_head_dim")
    for key in ("kv_lora_rank", "q_lora_rank"):
        rank = getattr(att, key)
        if rank > d_model:
            raise SpecError(f"{source}: key 'attention.{key}': expected at most d_model "
                            f"({d_model}), got {rank}")


def _check_latent_parts(att: AttentionSpec, source: str) -> None:
    """The lightning indexer and the gates that belong to latent attention."""
    if (att.index_heads or att.index_head_dim) and not (
            att.index_heads and att.index_head_dim and att.q_lora_rank and att.kv_lora_rank):
        raise SpecError(f"{source}: key 'attention.index_heads': the indexer needs latent "
                        "attention with q_lora_rank, and index_heads and index_head_dim, all > 0")
    if att.gate_bias and not (att.output_gate or att.head_gate):
        raise SpecError(f"{source}: key 'attention.gate_bias': needs an output gate "
                        "(attention.output_gate or attention.head_gate)")
    for key in ("rope_key_norm", "query_gate"):  # head_gate: any attention (LFM3's, Laguna's)
        if getattr(att, key) and not (att.kv_lora_rank and (att.q_lora_rank
                                                             or key != "query_gate")):
            raise SpecError(f"{source}: key 'attention.{key}': belongs to latent attention "
                            "(kv_lora_rank > 0; query_gate with q_lora_rank > 0)")


def spec_from_mapping(data: Any, source: str, default_name: str = "custom") -> ModelSpec:
    """Build and validate a spec from parsed YAML (or any mapping)."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: expected a mapping of keys to values, got "
                        f"{type(data).__name__}")
    if "name" not in data:
        data = {**data, "name": default_name}
    spec = build(source, ModelSpec, data, _SECTIONS, NOT_PRESET_KEYS)
    return check_spec(spec, source)


# ---------------------------------------------------------------------------------------------
# Presets: built-in names or YAML files.


def _preset_folder() -> Path:
    """The folder of the built-in YAML files: the package ``ffncli.presets`` of an install
    (setuptools maps the top-level presets/ to it), else, when ``ffncli`` is the source tree
    itself (run from the clone's root, where it shadows the install), the clone's presets/."""
    source = Path(__file__).resolve().parents[2] / "presets"
    try:  # by name: mypy cannot find a package that only the install maps
        presets = importlib.import_module("ffncli.presets")
    except ModuleNotFoundError:
        return source
    return Path(presets.__file__).parent if presets.__file__ is not None else source


def preset_names() -> list[str]:
    return sorted(p.stem for p in _preset_folder().glob("*.yaml"))


def _parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load``'s types, but strict: duplicate keys, aliases that expand past
    10,000 values and nesting past 64 levels are one-line errors (see ffncli.base.textformats)."""
    from ffncli.base.textformats import Malformed, parse_yaml

    try:
        return parse_yaml(text)
    except Malformed as exc:
        raise SpecError(f"{source}: invalid YAML{exc.where}: {exc.problem}") from None


def load_preset(name_or_path: str, words: validate.Words = validate.PARAMETERS) -> ModelSpec:
    """A built-in preset by name, or a YAML file by path; ``words``: how a config.json given
    in its place is told to be given (``config=...``, or a command's ``--config ...``)."""
    looks_like_path = name_or_path.endswith((".yaml", ".yml", ".json")) or "/" in name_or_path
    if not looks_like_path:
        names = preset_names()
        if name_or_path not in names:
            raise SpecError(
                f"unknown preset '{name_or_path}'{suggest(name_or_path, names)}; "
                f"built-in presets: {', '.join(names)}"
            )
        path = _preset_folder() / f"{name_or_path}.yaml"
        source = f"preset {name_or_path}"
        default_name = name_or_path
    else:
        path = Path(name_or_path)
        source = str(path)
        default_name = path.stem
    from ffncli.base.textformats import read_text

    text = read_text(path, "preset file", SpecError)
    data = _parse_yaml(text, source)
    hf_keys = [k for k in ("model_type", "architectures") if isinstance(data, dict) and k in data]
    if hf_keys:  # a Hugging Face config.json given as a preset
        raise SpecError(f"{source}: a Hugging Face config (it has '{hf_keys[0]}'), not a spec: "
                        f"give it with {words.given('config', name_or_path)}")
    return spec_from_mapping(data, source, default_name)


# ---------------------------------------------------------------------------------------------
# What-if overrides, shared by every command.


@record
class Overrides:
    """The what-if values every command takes (None: the spec's own)."""

    d_model: int | None = None
    d_ff: int | None = None
    activation: str | None = None  # a plain activation keeps the gating; a GLU name sets it
    gated: bool | None = None
    experts: int | None = None
    top_k: int | None = None
    capacity_factor: float | None = None
    beta: float | None = None
    match_params: bool = False
    multiple_of: int = 1
    seq_len: int | None = None  # attention-score FLOPs (params)


# How the errors about what the caller gave name it: a library call's parameters (ffncli.load_spec's
# keyword arguments); the commands pass their options (ffncli.jobs.choices.SPEC_OPTIONS).
# "gating": what makes an FFN gated (--match-params' error); "model": what else describes a
# model (a GGUF architecture no reader knows, ffncli.specs.gguf).
SPEC_PARAMETERS = {
    "d_model": "d_model", "d_ff": "d_ff", "activation": "activation", "experts": "experts",
    "top_k": "top_k", "capacity_factor": "capacity_factor", "beta": "beta",
    "match_params": "match_params", "multiple_of": "multiple_of", "seq_len": "seq_len",
    "gating": "activation='swiglu' (or 'geglu', 'reglu', 'glu', 'bilinear') or gated=True",
    "model": "config=config.json",
}


def match_gated_d_ff(d_model: int, d_ff: int, bias: bool, multiple_of: int = 1) -> int:
    """The gated FFN width with (about) the parameters of a two-matrix FFN of width ``d_ff``.

    Two matrices: 2 d f (+ f + d biases). Three: 3 d g (+ 2 g + d). Solving for g gives the
    seeds' 2/3 rule, g = 2 f / 3 without biases and f (2d + 1) / (3d + 2) with them. The result
    is rounded to the nearest integer (halves up); with ``multiple_of`` > 1 it is then rounded
    up to a multiple of it, as LLaMA does (16384 * 2/3 -> 11008 with multiple_of 256).
    """
    numerator = d_ff * (2 * d_model + 1) if bias else 2 * d_ff
    denominator = 3 * d_model + 2 if bias else 3
    g = (2 * numerator + denominator) // (2 * denominator)  # round half up, exact integers
    if multiple_of > 1:
        g = -(-g // multiple_of) * multiple_of
    return max(g, 1)


def apply_overrides(spec: ModelSpec, ov: Overrides,
                    names: Mapping[str, str] = SPEC_PARAMETERS) -> ModelSpec:
    """A new spec with the what-if values applied, validated again; errors name each value as
    ``names`` says."""
    new_ffn = replace(spec.ffn, **_ffn_changes(spec.ffn, ov, names))
    d_model = spec.d_model
    if ov.d_model is not None:
        d_model = validate.whole(names["d_model"], ov.d_model, error=SpecError)
    validate.whole(names["multiple_of"], ov.multiple_of, error=SpecError)
    seq_len = spec.seq_len
    if ov.seq_len is not None:
        seq_len = validate.whole(names["seq_len"], ov.seq_len, error=SpecError)
    if ov.match_params:
        new_ffn = _matched(new_ffn, d_model, ov.multiple_of, names)
    attention = spec.attention
    if attention is not None and ov.d_model is not None and attention.head_dim is None:
        if d_model % attention.heads:
            raise SpecError(
                f"{names['d_model']}: {d_model} is not divisible by the {attention.heads} "
                "attention heads"
            )
    new = replace(spec, d_model=d_model, ffn=new_ffn, seq_len=seq_len)
    return check_spec(new, "overrides")


def _ffn_changes(ffn: FfnSpec, ov: Overrides, names: Mapping[str, str]) -> dict[str, Any]:
    """The FFN's fields the what-if sets: its activation (a GLU name sets the gating too),
    gating, widths, experts and scalars, each checked; fewer experts than top-k lower it."""
    changes: dict[str, Any] = {}
    if ov.activation is not None:
        changes.update(_activation(ov.activation, names["activation"]))
    if ov.gated is not None:
        changes["gated"] = ov.gated
    for key in ("d_ff", "experts", "top_k"):
        value = getattr(ov, key)
        if value is not None:
            changes[key] = validate.whole(names[key], value, error=SpecError)
    for key in ("beta", "capacity_factor"):
        value = getattr(ov, key)
        if value is not None:
            changes[key] = validate.number(names[key], value, positive=True, error=SpecError)
    if ov.experts is not None and ov.top_k is None and ffn.top_k > ov.experts:
        changes["top_k"] = ov.experts
    return changes


def _activation(name: str, where: str) -> dict[str, Any]:
    """``--activation``: a GLU name (its activation, gated) or a plain activation."""
    if name in GLU_VARIANTS:
        return {"activation": GLU_VARIANTS[name], "gated": True}
    if name in ACTIVATIONS:
        return {"activation": name}
    validate.name(where, name, ACTIVATIONS + tuple(GLU_VARIANTS), SpecError)
    return {}  # not reached: validate.name refuses the name


def _matched(ffn: FfnSpec, d_model: int, multiple_of: int, names: Mapping[str, str]
             ) -> FfnSpec:
    """``--match-params``: the gated FFN's width for the parameters of a two-matrix one."""
    if not ffn.gated:
        raise SpecError(f"{names['match_params']}: needs a gated FFN; add {names['gating']}")
    return replace(ffn, d_ff=match_gated_d_ff(d_model, ffn.d_ff, ffn.bias, multiple_of))

