"""``params``: a spec's count (parameters, FLOPs, weight memory, KV cache) and, with
``--weights``, a checkpoint's beside it, counted from its headers alone. Never imports NumPy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.base.validate import whole
from ffncli.counting.kv import kv_cache
from ffncli.counting.model import count
from ffncli.counting.results import FileOnlyResult, ParamsResult
from ffncli.errors import InputError
from ffncli.jobs.choices import SPEC_OPTIONS, TRAIN_OPTIONS
from ffncli.jobs.resolve import Counted, config_beside, resolve_spec
from ffncli.specs.spec import ModelSpec, Overrides, apply_overrides

if TYPE_CHECKING:  # imported when a file, a plan or a budget is given: off the preset's path
    from ffncli.counting.files import FileCount
    from ffncli.counting.fit import Budget
    from ffncli.counting.training import Plan

_NO_CONFIG = "no --preset or --config, and no config.json beside the weights"


def count_model(preset: str | None, config: Path | None, overrides: Overrides,
                weights: Path | Counted | None = None, batch: int = 1,
                plan: Plan | None = None, budget: Budget | None = None
                ) -> ParamsResult | FileOnlyResult:
    """``params``: the spec's count and KV cache at its seq_len x ``batch``; with ``weights``
    (a .safetensors file, an index or a model folder; or a model on the Hub, its headers read
    by range: ``Counted``) the count of every shard's header beside it (no tensor data is
    read), the spec from the config.json beside the weights unless one is given. A checkpoint
    without a config, or with a model type no reader knows, is still counted from the file's
    tensor names. ``plan``: the memory of training it (``--train``); ``budget``: what fits in
    that memory (``--fit``)."""
    whole("option --batch", batch)
    if plan is not None:
        plan.check(TRAIN_OPTIONS)
    located = weights if isinstance(weights, Counted) else Counted(weights, None if weights
                                                                   is None else str(weights))
    path = located.path
    if path is not None and path.suffix.lower() == ".gguf":
        return _count_gguf(preset, config, overrides, path, batch, located, plan, budget)
    file = None
    if path is None:
        spec = resolve_spec(preset, config, overrides)
    else:
        beside = _with_checkpoint(preset, config, overrides, located, path, plan, budget)
        if isinstance(beside, FileOnlyResult):
            return beside
        spec, file, config = beside
    limit = _context(spec, overrides, budget,
                     lambda ov: resolve_spec(preset, config, ov, weights=path))
    return _planned(spec, file, located.name, batch, plan, budget, limit)


def _with_checkpoint(preset: str | None, config: Path | None, overrides: Overrides,
                     located: Counted, weights: Path, plan: Plan | None, budget: Budget | None
                     ) -> tuple[ModelSpec, FileCount, Path | None] | FileOnlyResult:
    """A checkpoint's count and the spec beside it (the config.json beside the weights unless
    a preset or config is given; its quantization_config checked) and the config it came
    from; the file counted alone when it has no config, or one of a model type no reader
    knows (unless the what-if, --train or --fit options need a spec)."""
    from ffncli.counting.files import count_file
    from ffncli.specs.archs import UnsupportedModelType

    if preset is None and config is None:
        config = config_beside(weights)
        if config is None:
            if overrides != Overrides() or plan is not None or budget is not None:
                raise InputError(f"the what-if, --train and --fit options need a spec; "
                                 f"{_NO_CONFIG}")
            return FileOnlyResult(count_file(located.checkpoint(weights)), str(located.name),
                                  _NO_CONFIG)
    try:  # with the weights: a config.json's quantization_config is checked
        spec = resolve_spec(preset, config, overrides, weights=weights)
    except UnsupportedModelType as exc:
        if plan is not None or budget is not None:
            raise
        return FileOnlyResult(count_file(located.checkpoint(weights)), str(located.name),
                              str(exc))
    return spec, count_file(located.checkpoint(weights)), config


def count_spec_planned(spec: ModelSpec, batch: int, plan: Plan | None, budget: Budget | None,
                       names: Mapping[str, str]) -> ParamsResult:
    """The library's ``params`` of a spec it was given: the count, the KV cache at its
    seq_len x ``batch``, and when asked the plan's memory and what fits (the spec's seq_len is
    the context limit ``--fit`` notes); ``names``: how the plan's errors name its fields."""
    return _planned(spec, None, None, batch, plan, budget,
                    spec.seq_len if budget is not None else None, names)


def _context(spec: ModelSpec, overrides: Overrides, budget: Budget | None,
             resolve: Callable[[Overrides], ModelSpec]) -> int | None:
    """``--fit``'s note: the model's own context limit, the seq_len before ``--seq-len``
    overrode it (the spec resolved again only when it did)."""
    if budget is None:
        return None
    if overrides.seq_len is None:
        return spec.seq_len
    return resolve(dataclasses.replace(overrides, seq_len=None)).seq_len


def _planned(spec: ModelSpec, file: FileCount | None, named: str | None, batch: int,
             plan: Plan | None, budget: Budget | None, limit: int | None,
             names: Mapping[str, str] = TRAIN_OPTIONS) -> ParamsResult:
    """The spec's count, its KV cache and, when asked, its training plan and what fits."""
    c, kv = count(spec), kv_cache(spec, spec.seq_len, batch)
    if plan is None and budget is None:
        return ParamsResult(c, file, named, kv)
    from ffncli.counting.fit import TrainFit, fit_inference
    from ffncli.counting.training import training

    trained = (training(spec, dataclasses.replace(plan, seq_len=spec.seq_len, batch=batch),
                        names)
               if plan is not None else None)
    return ParamsResult(
        c, file, named, kv, trained, budget,
        fit_inference(c, kv, budget) if budget is not None else (),
        TrainFit(trained.total.total, budget.usable) if trained and budget else None,
        limit)


def _count_gguf(preset: str | None, config: Path | None, overrides: Overrides, weights: Path,
                batch: int, located: Counted, plan: Plan | None, budget: Budget | None
                ) -> ParamsResult | FileOnlyResult:
    """``params --weights model.gguf``: its tensor infos counted, its metadata's spec (or the
    --preset / --config given) beside them; an architecture no reader knows is counted from
    the file alone."""
    from ffncli.counting.files import count_gguf
    from ffncli.specs.gguf import UnsupportedArchitecture, spec_from_header

    header = located.gguf(weights)
    file = count_gguf(header)

    def spec_of(ov: Overrides) -> ModelSpec:
        return (resolve_spec(preset, config, ov) if preset or config else
                apply_overrides(spec_from_header(header, SPEC_OPTIONS), ov, SPEC_OPTIONS))

    try:
        spec = spec_of(overrides)
    except UnsupportedArchitecture as exc:
        if plan is not None or budget is not None:
            raise
        return FileOnlyResult(file, str(located.name), str(exc))
    return _planned(spec, file, located.name, batch, plan, budget,
                    _context(spec, overrides, budget, spec_of))
