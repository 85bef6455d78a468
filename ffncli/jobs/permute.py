"""``permute-check`` as the command runs it: the target (a user's ``--impl`` function, guarded,
or a model's FFN), the tokens read once and held in memory, the report path checked before any
work, every property checked."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ffncli.analysis.compare import tolerances
from ffncli.analysis.frameworks import Fn
from ffncli.analysis.guard import (
    Judge,
    check_timeout,
    guarded,
    impl_path,
    module_files,
    split_target,
)
from ffncli.analysis.isolate import Child, isolated
from ffncli.analysis.properties import CheckReport, permute_check
from ffncli.base.files import check_output_path
from ffncli.base.validate import number, whole
from ffncli.errors import InputError
from ffncli.jobs.choices import OPTIONS, ModelChoice, TokenChoice
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
    """What is checked: a user's ``--impl`` (in a child process) or the engine of a model;
    ``caller(seq)`` is it as the checks call it, guarded, for sequences of ``seq`` tokens
    (3-D input) or None."""

    caller: Callable[[int | None], Fn]
    name: str
    d_model: int
    dtype: np.dtype
    timeout: float | None
    sources: tuple[Path, ...] = ()  # files the implementation was read from
    weights: Path | None = None  # the weights file or folder of a model's FFN
    framework: str = "numpy"
    mode: str | None = None
    notes: tuple[str, ...] = ()


def parse_impl_args(text: str | None) -> dict[str, Any] | None:
    """``--impl-args``: a JSON object of keyword arguments, for a class or a factory."""
    from ffncli.base.textformats import Malformed, parse_json

    if text is None:
        return None
    try:
        args = parse_json(text)
    except Malformed as exc:
        raise InputError(f"option --impl-args: invalid JSON{exc.where}: {exc.problem}") from None
    if not isinstance(args, dict):
        raise InputError(f"option --impl-args: expected a JSON object of keyword arguments, "
                         f"e.g. '{{\"d_model\": 512}}', got {type(args).__name__}")
    bad = [k for k in args if not k.isidentifier()]
    if bad:
        raise InputError(f"option --impl-args: {bad[0]!r} is not a keyword argument name")
    return args


@dataclass(frozen=True)
class ImplChoice:
    """How ``--impl`` is loaded: ``--impl-args``, ``--train-mode``, ``--seed``,
    ``--load-timeout``."""

    impl_args: dict[str, Any] | None = None
    train_mode: bool = False
    seed: int = 0
    load_timeout: float | None = None


@contextlib.contextmanager
def open_target(impl: str | None, choice: ModelChoice, overrides: Overrides,
                timeout: float | None, *, allow_nonfinite: bool = False,
                how: ImplChoice = ImplChoice()) -> Iterator[Target]:
    """``--impl module:NAME``, imported and built in a child process (killed, with all it
    started, on the way out), its width from ``--d-model``, the spec or its first
    ``nn.Linear``; or the FFN of the spec and weights (NaN or infinity in them refused unless
    ``allow_nonfinite``), in this process."""
    from ffncli.compute.build import parse_dtype
    from ffncli.jobs.resolve import load_model, weights_of

    np_dtype = parse_dtype(choice.dtype, "option --dtype")
    check_timeout(timeout, "option --timeout")
    if how.load_timeout is not None:
        number("option --load-timeout", how.load_timeout, positive=True)
    if impl is None:
        unused = [name for name, given in (("--impl-args", how.impl_args is not None),
                                           ("--train-mode", how.train_mode),
                                           ("--load-timeout", how.load_timeout is not None))
                  if given]
        if unused:
            raise InputError(f"option {unused[0]}: is for an --impl class or module; ffncli's "
                             "own FFN has neither")
        model = load_model(choice, overrides, allow_nonfinite=allow_nonfinite)
        engine, name = model.engine, model.spec.name
        yield Target(lambda seq: guarded(engine, name, np_dtype, timeout=timeout,
                                         words=OPTIONS), name,
                     engine.d_model, np_dtype, timeout,
                     weights=weights_of(choice.weights, choice.hub_model))
        return
    width = _impl_width(impl, choice, overrides)
    split_target(impl, OPTIONS)  # refused before a process is started for it
    with Child(impl, timeout, load_timeout=how.load_timeout, x64=np_dtype.itemsize == 8,
               words=OPTIONS) as child:
        loaded = child.load({"target": impl, "path": impl_path(), "dtype": np_dtype.name,
                             "impl_args": how.impl_args, "seed": how.seed,
                             "train_mode": how.train_mode, "d_model": width})
        if width is None:
            width = loaded.get("d_model")
        if width is None:
            how_to = "give the width with --d-model N (or a --preset)"
            no_width = loaded.get("no_width", "is a function")
            raise InputError(f"option --impl: {how_to}" if no_width == "is a function" else
                             f"option --impl: {impl} {no_width}: {how_to}")
        framework = str(loaded.get("framework"))

        def caller(seq: int | None) -> Fn:
            rows_only = framework != "numpy" and seq is None  # a module given 2-D input
            return isolated(child, Judge(impl, timeout, rows_only, OPTIONS), seq)

        yield Target(caller, impl, whole("the --impl module's d_model", width), np_dtype,
                     timeout, tuple(Path(p) for p in loaded.get("sources", [])),
                     framework=framework, mode=loaded.get("mode"),
                     notes=tuple(loaded.get("notes", ())))


def _impl_width(impl: str, choice: ModelChoice, overrides: Overrides) -> int | None:
    """The width ``--impl`` is checked at, when it is given (``--d-model``, or the spec of
    ``--preset``/``--config``); the options that would change nothing refused."""
    from ffncli.jobs.resolve import resolve_spec, weights_of

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
    if overrides.d_model is not None:
        return whole("option --d-model", overrides.d_model)
    if choice.preset is None and choice.config is None:
        return None
    return resolve_spec(choice.preset, choice.config).d_model


def report_path(path: Path | None, impl: str | None, choice: ModelChoice,
                tokens: TokenChoice) -> Path | None:
    """Where ``--junit-xml`` goes, refused before any work if it is an input of the command:
    the --impl module's files are found without running them."""
    from ffncli.jobs.targets import output_target

    module = (impl or "").partition(":")[0]
    sources = module_files(module, impl_path()) if module else []
    return output_target(path, "--junit-xml", choice, tokens,
                         more=[("--impl module's source", source) for source in sources])


def not_a_source(path: Path | None, target: Target) -> Path | None:
    """The --junit-xml ``path``, refused if the implementation was defined in it (a file
    only the loaded module could tell)."""
    if path is None:
        return None
    return check_report_path(path, [("--impl module's source", p) for p in target.sources])


def check_command(target: Target, choice: TokenChoice, *, trials: int = 8,
                  rtol: float | None = None, atol: float | None = None,
                  bitwise: bool = False) -> CheckReport:
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
        in_memory.path, in_memory.allow = tokens.path, tokens.allow  # the error names both
        check_finite(in_memory, target.dtype, x.shape[0])
    shape = tokens.shape if len(tokens.shape) > 1 else (1, tokens.d_model)
    f = target.caller(shape[1] if len(shape) == 3 else None)
    tolerances(x.dtype, rtol, atol, ("option --rtol", "option --atol"))  # the command's words
    return permute_check(f, x, target=target.name, input_shape=shape, trials=trials,
                         seed=choice.seed, rtol=rtol, atol=atol, bitwise=bitwise,
                         about={"framework": target.framework, "mode": target.mode,
                                "notes": target.notes})


# ---------------------------------------------------------------------------------------------
# In the caller's own process: ffncli.permute_check and ffncli.testing.

RANDOM_TOKENS = 32  # tokens drawn when none are given


def check_here(obj: object, tokens: Any = None, *, name: str | None = None,
               d_model: int | None = None, trials: int = 8, seed: int = 0,
               rtol: float | None = None, atol: float | None = None,
               timeout: float | None = None, bitwise: bool = False, train_mode: bool = False,
               impl_args: dict[str, Any] | None = None) -> CheckReport:
    """Check ``obj`` (a NumPy or JAX function, a PyTorch or Flax module, a class or factory
    of one) in this process on ``tokens`` (a NumPy array or a framework tensor: (tokens,
    d_model) or (batch, seq, d_model); None: 32 random tokens from ``seed``). A module is
    checked in eval mode unless ``train_mode``, and put back in its mode afterwards."""
    from ffncli.analysis.frameworks import adapted, as_numpy
    from ffncli.analysis.properties import permute_check
    from ffncli.formats.tokens import token_array

    label = str(name or getattr(obj, "__name__", type(obj).__name__))
    given = None if tokens is None else np.asarray(as_numpy(tokens))
    dtype = _dtype_of(obj) or np.dtype(
        given.dtype if given is not None and given.dtype.kind == "f" else
        np.float32 if given is None else np.float64)
    tolerances(dtype, rtol, atol)  # refuse NaN and negative tolerances up front
    check_timeout(timeout)
    whole("trials", trials, 0, MAX_TRIALS)
    with adapted(obj, label, dtype=dtype, impl_args=impl_args, seed=seed, d_model=d_model,
                 train_mode=train_mode) as ffn:
        width = d_model or ffn.d_model or getattr(obj, "d_model", None)
        if given is None:
            if width is None:
                raise InputError(f"{label} {ffn.no_width}: give tokens, or d_model=N")
            given = np.random.default_rng(seed).standard_normal((RANDOM_TOKENS, width))
        x = token_array(given, width)
        shape = x.shape if x.ndim > 1 else (1, x.shape[-1])
        ffn.seq = shape[1] if len(shape) == 3 else None
        rows_only = ffn.framework != "numpy" and ffn.seq is None
        return permute_check(guarded(ffn.fn, label, dtype, timeout=timeout, rows_only=rows_only),
                             x.reshape(-1, x.shape[-1]).astype(dtype, copy=False), target=label,
                             input_shape=tuple(shape), trials=trials, seed=seed, rtol=rtol,
                             atol=atol, bitwise=bitwise,
                             about={"framework": ffn.framework, "mode": ffn.mode,
                                    "notes": tuple(ffn.notes)})



def _dtype_of(obj: object) -> np.dtype | None:
    """The floating-point dtype ``obj`` says it computes in (``ffn.dtype``: a NumPy dtype, or
    a PyTorch one, as a Hugging Face module's ``.dtype`` is), or None when it says none NumPy
    has (``torch.bfloat16``) or none at all."""
    said = getattr(obj, "dtype", None)
    if said is None:
        return None
    for name in (said, str(said).removeprefix("torch.")):
        try:
            dtype = np.dtype(name)
        except TypeError:
            continue
        return dtype if dtype.kind == "f" else None
    return None
