"""Which model a command means: the spec (a preset, a YAML file, a config.json, the config.json
beside a checkpoint) with its what-if overrides, and the FFN built from it.

Spec resolution does not import NumPy (``params`` stays integer arithmetic); building the FFN
does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.errors import InputError
from ffncli.spec import ModelSpec, Overrides, apply_overrides, load_preset
from ffncli.validate import whole

if TYPE_CHECKING:
    from ffncli.counting import FileOnlyResult, ParamsResult
    from ffncli.runner import Model

_NO_MODEL = "give a model: --preset NAME|FILE or --config config.json"
_NO_MODEL_OR_WEIGHTS = ("give a model: --preset NAME|FILE, --config config.json, or "
                        "--weights model.safetensors with a config.json beside it")


def config_beside(weights: Path) -> Path | None:
    """The ``config.json`` beside a ``.safetensors`` checkpoint, when there is a readable one."""
    import os

    if weights.suffix.lower() != ".safetensors":
        return None
    beside = weights.parent / "config.json"
    return beside if beside.is_file() and os.access(beside, os.R_OK) else None


def resolve_spec(preset: str | None, config: Path | None, overrides: Overrides | None = None,
                 *, weights: Path | None = None, weights_describe: bool = False) -> ModelSpec:
    """The spec of ``--preset`` or ``--config`` (never both), with ``overrides`` applied.

    With ``weights_describe`` (commands that run a checkpoint), the config.json beside a
    ``.safetensors`` file stands in for a missing ``--config``."""
    if preset is not None and config is not None:
        raise InputError("give --preset or --config, not both")
    if preset is None and config is None and weights is not None \
            and weights.suffix.lower() == ".gguf":  # a GGUF file describes itself
        from ffncli.gguf import read_header, spec_from_header

        return apply_overrides(spec_from_header(read_header(weights)), overrides or Overrides())
    if weights_describe and config is None and preset is None and weights is not None:
        config = config_beside(weights)
    if config is not None:
        from ffncli.hfconfig import load_config

        spec = load_config(config)
    elif preset is not None:
        spec = load_preset(preset)
    else:
        raise InputError(_NO_MODEL_OR_WEIGHTS if weights_describe else _NO_MODEL)
    return apply_overrides(spec, overrides or Overrides())


def load_model(preset: str | None, config: Path | None, overrides: Overrides,
               weights: Path | None, layer: int, dtype: str,
               max_memory: str | None) -> Model:
    """The spec and its FFN: random from the spec's seed, or one layer of a weights file."""
    from ffncli import runner
    from ffncli.weights import parse_size

    spec = resolve_spec(preset, config, overrides, weights=weights, weights_describe=True)
    budget = parse_size(max_memory) if max_memory is not None else None
    return runner.build_model(spec, weights, layer, runner.parse_dtype(dtype), budget)


def count_model(preset: str | None, config: Path | None, overrides: Overrides,
                weights: Path | None = None, batch: int = 1) -> ParamsResult | FileOnlyResult:
    """``params``: the spec's count and KV cache at its seq_len x ``batch``; with ``weights``
    (a .safetensors file) its header's count beside it (no tensor data is read). A config of
    a model type no reader knows is still counted from the file's tensor names."""
    from ffncli.checkpoint import count_file, read_header
    from ffncli.counting import FileOnlyResult, ParamsResult, count, kv_cache
    from ffncli.hfconfig import UnsupportedModelType

    whole("option --batch", batch)
    if weights is not None and weights.suffix.lower() == ".gguf":
        return _count_gguf(preset, config, overrides, weights, batch)
    try:
        spec = resolve_spec(preset, config, overrides)
    except UnsupportedModelType as exc:
        if weights is None:
            raise
        return FileOnlyResult(count_file(read_header(weights)), str(weights), str(exc))
    file = count_file(read_header(weights)) if weights is not None else None
    return ParamsResult(count(spec), file, str(weights) if weights is not None else None,
                        kv_cache(spec, spec.seq_len, batch))


def _count_gguf(preset: str | None, config: Path | None, overrides: Overrides, weights: Path,
                batch: int) -> ParamsResult | FileOnlyResult:
    """``params --weights model.gguf``: its tensor infos counted, its metadata's spec (or the
    --preset / --config given) beside them; an architecture no reader knows is counted from
    the file alone."""
    from ffncli.counting import FileOnlyResult, ParamsResult, count, kv_cache
    from ffncli.gguf import UnsupportedArchitecture, count_file, read_header, spec_from_header

    header = read_header(weights)
    file = count_file(header)
    try:
        spec = (resolve_spec(preset, config, overrides) if preset or config else
                apply_overrides(spec_from_header(header), overrides))
    except UnsupportedArchitecture as exc:
        return FileOnlyResult(file, str(weights), str(exc))
    return ParamsResult(count(spec), file, str(weights), kv_cache(spec, spec.seq_len, batch))
