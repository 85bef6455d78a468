"""One layer's FFN as the commands build it: the dtype, the weights (random from the spec's seed,
an .npz, or a layer of a checkpoint through its open handle), the engine's tokens per chunk
within the free memory. A mixture of experts the engine would compute wrongly is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ffncli.base.validate import LIBRARY_SIZING, Keys, Sizing, whole
from ffncli.compute import memory
from ffncli.compute import weights as W
from ffncli.compute.engine import Engine, default_chunk_tokens
from ffncli.compute.ffn import Activation, Routing
from ffncli.errors import ConfigError, InputError, SpecError
from ffncli.formats.tensors import Tensors, is_checkpoint, open_tensors
from ffncli.specs.archs import ffn_layout, not_run
from ffncli.specs.spec import ModelSpec

DTYPES = {"float32": np.float32, "float64": np.float64}


@dataclass(frozen=True)
class Model:
    spec: ModelSpec
    engine: Engine
    source: str  # where the weights came from, for people


def parse_dtype(name: str, where: str = "dtype") -> np.dtype:
    """``where`` names it in errors (a command: ``option --dtype``)."""
    if name not in DTYPES:
        raise InputError(f"{where}: expected float32 or float64, got {name!r}")
    return np.dtype(DTYPES[name])


def _softmax_top_k(keys: Keys) -> Routing:
    """Qwen2-MoE, Qwen3-MoE, OLMoE: softmax over all, renormalised with norm_topk_prob."""
    return Routing(renormalise=keys.flag("norm_topk_prob", False))


def _sigmoid_grouped(groups: int, top_groups: int, scale: float) -> Callable[[Keys], Routing]:
    """DeepSeek-V3 and GLM-4.5: sigmoid scores (the score-correction bias added to choose),
    n_group groups of which topk_group, renormalised with norm_topk_prob, times
    routed_scaling_factor; the arguments are the config class's defaults."""
    return lambda keys: Routing(
        score="sigmoid", renormalise=keys.flag("norm_topk_prob", True),
        groups=keys.whole("n_group", groups) or groups,
        top_groups=keys.whole("topk_group", top_groups) or top_groups,
        scale=keys.number("routed_scaling_factor", scale))


def _deepseek_v2(keys: Keys) -> Routing:
    """DeepSeek-V2: softmax; topk_method group_limited_greedy chooses within the topk_group
    groups of best single score; times routed_scaling_factor, never renormalised (transformers
    5.25's router does not read norm_topk_prob)."""
    scale = keys.number("routed_scaling_factor", 1.0)
    if keys.text("topk_method", "greedy") != "group_limited_greedy":
        return Routing(renormalise=False, scale=scale)
    return Routing(renormalise=False, scale=scale, groups=keys.whole("n_group", 1) or 1,
                   top_groups=keys.whole("topk_group", 1) or 1, group_score="max")


# How each family's router chooses, from its config's keys (missing keys: the defaults of its
# transformers 5.25 config class); a family not named routes as Mixtral (softmax top-k,
# renormalised).
ROUTING: dict[str, Callable[[Keys], Routing]] = {
    "qwen2_moe": _softmax_top_k, "qwen3_moe": _softmax_top_k, "olmoe": _softmax_top_k,
    "deepseek_v3": _sigmoid_grouped(8, 4, 2.5), "glm4_moe": _sigmoid_grouped(1, 1, 1.0),
    "deepseek_v2": _deepseek_v2}


def routing_rule(spec: ModelSpec, settings: Keys | None = None) -> Routing:
    """How the router of the spec's family chooses, from its config's keys ``settings``
    (None: the config class's defaults); groups that do not divide the experts, or more
    groups chosen than there are, are refused naming the keys."""
    read = ROUTING.get(spec.family)
    keys = settings or Keys({}, spec.name)
    try:
        rule = Routing() if read is None else read(keys)
    except ValueError:
        rule = None
    if rule is None or spec.ffn.experts % rule.groups:
        raise ConfigError(f"{keys.source}: keys 'n_group' and 'topk_group': expected groups "
                          f"dividing the {spec.ffn.experts} experts, at most n_group of them "
                          f"chosen, got {keys.data.get('n_group')!r} and "
                          f"{keys.data.get('topk_group')!r}")
    return rule


def _uncomputed(spec: ModelSpec) -> str | None:
    """What of a mixture the checkpoint layout of the spec's family cannot give the engine:
    a shared expert without its tensors' names, dense layers without theirs."""
    layout = ffn_layout(spec)
    ffn = spec.ffn
    dense = ffn.is_moe and any(k.ffn is not None and not k.ffn.is_moe
                               for k in spec.decoder_kinds())
    if ffn.shared_d_ff and (layout is None or layout.shared is None):
        return "a shared expert"
    if dense and (layout is None or layout.dense is None):
        return "dense layers"
    return None


def check_runnable(spec: ModelSpec, checkpoint: bool = True) -> None:
    """Refuse a spec whose FFN the engine would compute wrongly rather than answer wrongly
    (``checkpoint``: its weights come from a checkpoint, whose layout must name every part;
    random and .npz weights hold every part the spec has)."""
    reason = not_run(spec) or (_uncomputed(spec) if checkpoint else None)
    if reason is not None:
        what = "mixture of experts" if spec.ffn.is_moe else "FFN"
        raise SpecError(f"{spec.name}: run, permute-check and relu-stats do not compute this "
                        f"{what} yet ({reason}); params counts it exactly")


def one_ffn(weights: Path | None) -> bool:
    """Random weights (None) and a ``.npz`` hold one FFN: no layers to pick from."""
    return weights is None or weights.suffix.lower() == ".npz"


def build_model(spec: ModelSpec, weights: Path | None, layer: int, dtype: np.dtype,
                max_memory: int | None = None, chunk_tokens: int | None = None,
                tensors: Tensors | None = None, allow_nonfinite: bool = False,
                names: Sizing = LIBRARY_SIZING, weights_name: str = "weights",
                settings: Keys | None = None) -> Model:
    """The FFN of layer ``layer``: random weights, a ``.npz``, or a checkpoint (a ``.gguf``
    file, a ``.safetensors`` file, an index or a model folder), read through ``tensors`` when
    the caller holds it open (a walk over every layer), else opened here. Weights holding NaN
    or infinity are refused (NonfiniteWeightsError, naming the tensor) unless
    ``allow_nonfinite``. ``names`` and ``weights_name``: how errors name the caller's knobs
    (a command passes its options). ``settings``: the config's keys, which say how a
    mixture of experts routes (:func:`routing_rule`)."""
    whole("layer", layer, 0)
    if layer and one_ffn(weights):
        raise InputError(f"layer {layer}: random and .npz weights are one FFN (layer 0); a "
                         "layer picks one of a checkpoint")
    check_runnable(spec, not one_ffn(weights))
    rule = routing_rule(spec, settings)
    if weights is None:
        params = W.random_weights(spec, dtype, max_memory, names, rule)
        source = f"random: normal(0, {spec.init.std:g}), seed {spec.init.seed}"
    elif weights.suffix.lower() == ".npz":
        params = W.npz_weights(weights, spec, dtype, not allow_nonfinite, rule)
        source = str(weights)
    elif tensors is not None:
        params = W.layer_weights(tensors, spec, layer, dtype, not allow_nonfinite, rule)
        source = f"{weights}, layer {layer}"
    elif is_checkpoint(weights):
        with open_tensors(weights) as opened:
            params = W.layer_weights(opened, spec, layer, dtype, not allow_nonfinite, rule)
        source = f"{weights}, layer {layer}"
    else:
        raise InputError(f"{weights_name}: expected a .npz, .safetensors or .gguf file, an "
                         f"index (.json) or a model folder, got {weights}")
    rows = chunk_tokens or _fitting_chunk(spec, dtype, names)
    act = Activation(spec.ffn.activation, spec.ffn.beta)
    return Model(spec, Engine(params, act, rows), source)


def _fitting_chunk(spec: ModelSpec, dtype: np.dtype, names: Sizing = LIBRARY_SIZING) -> int:
    """The engine's tokens per chunk, fewer when a very wide hidden layer would not fit in
    half the free memory; refused when not even one token fits."""
    ffn = spec.ffn
    rows = default_chunk_tokens(ffn.d_ff)
    free = memory.available_memory()
    if free is None:
        return rows
    per_token = memory.engine_bytes(spec.d_model, ffn.d_ff, ffn.experts, dtype, 1)
    while rows > 1 and memory.engine_bytes(spec.d_model, ffn.d_ff, ffn.experts, dtype, rows) > \
            free // 2:
        rows //= 2
    memory.check_working_set(f"one FFN layer of {spec.name} (d_model {spec.d_model:,}, d_ff "
                        f"{ffn.d_ff:,}) on one token", per_token,
                        f"shrink it ({names.shape})")
    return rows
