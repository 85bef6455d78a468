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

if TYPE_CHECKING:
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


def resolve_spec(preset: str | None, config: Path | None, overrides: Overrides = Overrides(),
                 *, weights: Path | None = None, weights_describe: bool = False) -> ModelSpec:
    """The spec of ``--preset`` or ``--config`` (never both), with ``overrides`` applied.

    With ``weights_describe`` (commands that run a checkpoint), the config.json beside a
    ``.safetensors`` file stands in for a missing ``--config``."""
    if preset is not None and config is not None:
        raise InputError("give --preset or --config, not both")
    if weights_describe and config is None and preset is None and weights is not None:
        config = config_beside(weights)
    if config is not None:
        from ffncli.hfconfig import load_config

        spec = load_config(config)
    elif preset is not None:
        spec = load_preset(preset)
    else:
        raise InputError(_NO_MODEL_OR_WEIGHTS if weights_describe else _NO_MODEL)
    return apply_overrides(spec, overrides)


def load_model(preset: str | None, config: Path | None, overrides: Overrides,
               weights: Path | None, layer: int, dtype: str,
               max_memory: str | None) -> Model:
    """The spec and its FFN: random from the spec's seed, or one layer of a weights file."""
    from ffncli import runner
    from ffncli.weights import parse_size

    spec = resolve_spec(preset, config, overrides, weights=weights, weights_describe=True)
    budget = parse_size(max_memory) if max_memory is not None else None
    return runner.build_model(spec, weights, layer, runner.parse_dtype(dtype), budget)
