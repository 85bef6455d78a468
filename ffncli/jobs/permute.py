"""``permute-check`` as the command runs it: the target (a user's ``--impl`` function, guarded,
or a model's FFN), the tokens read once and held in memory, the report path checked before any
work, every property checked."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ffncli.analysis.guard import Fn, check_timeout, guarded, impl_sources, load_impl
from ffncli.analysis.properties import CheckReport, permute_check
from ffncli.base.files import check_output_path
from ffncli.base.validate import whole
from ffncli.errors import InputError
from ffncli.jobs.choices import ModelChoice, TokenChoice
from ffncli.specs.spec import Overrides


def check_report_path(path: Path, inputs: Iterable[tuple[str, Path | None]]) -> Path:
    """Where a ``--junit-xml`` report will go, refused before any work if it is one of the
    command's ``inputs``, a directory, a device, or in no folder."""
    return check_output_path(path, inputs, "--junit-xml")


# ---------------------------------------------------------------------------------------------
# permute-check as the command runs it.

MAX_TOKENS = 100_000  # the input is held in memory and run many times
MAX_TRIALS = 10_000  # random permutations: each is one more call of the FFN on every token


@dataclass(frozen=True)
class Target:
    """What is checked: a user's ``--impl`` function or the engine of a model, guarded."""

    fn: Fn
    name: str
    d_model: int
    dtype: np.dtype
    timeout: float | None
    sources: tuple[Path, ...] = ()  # files the implementation was read from
    weights: Path | None = None  # the weights file or folder of a model's FFN


def load_target(impl: str | None, choice: ModelChoice, overrides: Overrides,
                timeout: float | None, *, allow_nonfinite: bool = False) -> Target:
    """``--impl module:function`` (its width from ``--d-model`` or the spec), or the FFN of
    the spec and weights (NaN or infinity in them refused unless ``allow_nonfinite``)."""
    from ffncli.compute.build import parse_dtype
    from ffncli.jobs.resolve import load_model, resolve_spec, weights_of

    np_dtype = parse_dtype(choice.dtype)
    check_timeout(timeout)
    if impl is None:
        model = load_model(choice, overrides, allow_nonfinite=allow_nonfinite)
        return Target(model.engine, model.spec.name, model.engine.d_model, np_dtype, timeout,
                      weights=weights_of(choice.weights, choice.hub_model))
    weights_of(choice.weights, choice.hub_model, impl)  # refuses --model with --impl
    if choice.weights is not None:
        raise InputError("give --impl or --weights, not both")
    ignored = [name for name, given in (
        ("--layer", choice.index() != 0), ("--max-memory", choice.max_memory is not None),
        ("the what-if options but --d-model", replace(overrides, d_model=None) != Overrides()),
    ) if given]
    if ignored:  # they describe our FFN, not the user's function
        raise InputError(f"option --impl: checks your function as it is; {', '.join(ignored)} "
                         "would change nothing")
    if overrides.d_model is None and choice.preset is None and choice.config is None:
        raise InputError("option --impl: give the width with --d-model N (or a --preset)")
    width = whole("option --d-model", overrides.d_model) if overrides.d_model is not None \
        else resolve_spec(choice.preset, choice.config).d_model
    fn = load_impl(impl, timeout=timeout)
    return Target(fn, impl, width, np_dtype, timeout, tuple(impl_sources(impl)))


def report_path(path: Path | None, target: Target, choice: ModelChoice,
                tokens: TokenChoice) -> Path | None:
    """Where ``--junit-xml`` goes, refused before any work if it is an input of the command."""
    from ffncli.jobs.targets import output_target

    return output_target(path, "--junit-xml", choice, tokens,
                         more=[("--impl module's source", source) for source in target.sources])


def check_command(target: Target, choice: TokenChoice, *, trials: int = 8,
                  rtol: float | None = None, atol: float | None = None) -> CheckReport:
    """Read the tokens once (at most 100,000, refused when they would not fit in memory),
    refuse NaN and infinity, and check every property with each call guarded."""
    from ffncli.compute.memory import check_in_memory
    from ffncli.formats.tokens import check_finite, from_array
    from ffncli.jobs.resolve import load_tokens

    whole("option --trials", trials, 0, MAX_TRIALS)
    tokens = load_tokens(choice, target.d_model)
    if tokens.n_tokens > MAX_TOKENS:
        raise InputError(f"permute-check holds the input in memory and runs it many times; "
                         f"{tokens.n_tokens:,} tokens is too many (at most {MAX_TOKENS:,})")
    check_in_memory(tokens, target.dtype, 6, "permute-check")  # input, outputs, trials
    x = tokens.matrix(target.dtype)  # read once; checked in memory
    if not choice.allow_nonfinite:
        in_memory = from_array(x)
        in_memory.path = tokens.path  # name the file in the error
        check_finite(in_memory, target.dtype, x.shape[0])
    shape = tokens.shape if len(tokens.shape) > 1 else (1, tokens.d_model)
    return permute_check(guarded(target.fn, target.name, target.dtype, timeout=target.timeout),
                         x, target=target.name, input_shape=shape, trials=trials,
                         seed=choice.seed, rtol=rtol, atol=atol)
