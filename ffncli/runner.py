"""`ffncli run` as a library call: build the FFN, stream the input through it, report.

Also the pieces that `permute-check` and `relu-stats` share with it: choosing the weights
(random, .npz, .safetensors) and the input (a file or seeded random tokens).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ffncli import quantised
from ffncli import weights as W
from ffncli.checks import compare, first_overflow, output_scale, tolerances
from ffncli.engine import Engine, default_chunk_tokens
from ffncli.errors import InputError, SpecError
from ffncli.ffn import Activation, MoEWeights, pre_activation
from ffncli.gguf import GgufHeader
from ffncli.gguf import layer_weights as gguf_layer_weights
from ffncli.spec import ModelSpec
from ffncli.tokens import AtomicNpyWriter, TokenInput, check_finite, open_input
from ffncli.validate import whole

LESSON_CHECKS = ("same_as_one_position_at_a_time", "swapping_positions_only_swaps_the_outputs")
SMALL_TOKENS = 1024  # inputs up to this size get the lesson's checks and a full JSON output
DTYPES = {"float32": np.float32, "float64": np.float64}

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Model:
    spec: ModelSpec
    engine: Engine
    source: str  # where the weights came from, for people


def parse_dtype(name: str) -> np.dtype:
    if name not in DTYPES:
        raise InputError(f"option --dtype: expected float32 or float64, got {name!r}")
    return np.dtype(DTYPES[name])


# Mixtures of experts that params counts exactly but the engine does not compute: their FFN
# has parts (a shared expert, dense first layers) or routing (no renormalisation of the top-k
# weights, DeepSeek's grouped sigmoid scores) that the engine's router would silently leave out.
NOT_RUN = {
    "qwen2_moe": "a gated shared expert, and top-k weights not renormalised",
    "qwen3_moe": "top-k weights renormalised only with norm_topk_prob",
    "deepseek_v3": "shared experts, dense first layers and grouped sigmoid routing",
}


def check_runnable(spec: ModelSpec) -> None:
    """Refuse a spec whose FFN the engine would compute wrongly rather than answer wrongly."""
    reason = NOT_RUN.get(spec.family)
    if reason is None and (spec.ffn.shared_d_ff or spec.layers.dense):
        reason = "a shared expert or dense layers"
    if reason is not None:
        raise SpecError(f"{spec.name}: run, permute-check and relu-stats do not compute this "
                        f"mixture of experts yet ({reason}); params counts it exactly")


def build_model(spec: ModelSpec, weights: Path | None, layer: int, dtype: np.dtype,
                max_memory: int | None = None, chunk_tokens: int | None = None,
                gguf_header: GgufHeader | None = None) -> Model:
    """The FFN of layer ``layer``: random weights, a ``.npz``, a ``.gguf`` (``gguf_header``: its
    header, already read, when many layers are built from one file) or a safetensors
    checkpoint."""
    whole("option --layer", layer, 0)
    if layer and (weights is None or weights.suffix.lower() == ".npz"):
        raise InputError(f"option --layer: picks a layer of a checkpoint (--weights or --model); "
                         f"random and .npz weights are one FFN, got --layer {layer}")
    check_runnable(spec)
    if weights is None:
        params = W.random_weights(spec, dtype, max_memory)
        source = f"random: normal(0, {spec.init.std:g}), seed {spec.init.seed}"
    elif weights.suffix.lower() == ".npz":
        params = W.npz_weights(weights, spec, dtype)
        source = str(weights)
    elif weights.suffix.lower() == ".gguf":
        params = gguf_layer_weights(weights, spec, layer, dtype, gguf_header)
        source = f"{weights}, layer {layer}"
    elif weights.suffix.lower() in (".safetensors", ".json") or os.path.isdir(weights):
        single = weights / "model.safetensors" if os.path.isdir(weights) else weights
        packed = quantised.layer_weights(single, spec, layer, dtype) \
            if single.suffix.lower() == ".safetensors" and single.is_file() else None  # GPTQ, AWQ
        params = packed if packed is not None else \
            W.safetensors_weights(weights, spec, layer, dtype)
        source = f"{weights}, layer {layer}"
    else:
        raise InputError(f"option --weights: expected a .npz, .safetensors or .gguf file, an "
                         f"index (.json) or a model folder, got {weights}")
    rows = chunk_tokens or _fitting_chunk(spec, dtype)
    act = Activation(spec.ffn.activation, spec.ffn.beta)
    return Model(spec, Engine(params, act, rows), source)


@dataclass
class RandomTokens(TokenInput):
    """``--random N``: tokens drawn from ``default_rng(seed).normal(0, 1)`` (float64, then
    cast), chunk by chunk as they are used, so that any N streams in bounded memory. The
    generator draws element after element, so the chunks are the rows of one whole draw."""

    seed: int = 0

    def chunks(self, rows: int, dtype: np.dtype,
               finite: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.n_tokens, rows):
            shape = (min(rows, self.n_tokens - start), self.d_model)
            yield start, rng.normal(0.0, 1.0, shape).astype(dtype, copy=False)

    def matrix(self, dtype: np.dtype) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        return rng.normal(0.0, 1.0, (self.n_tokens, self.d_model)).astype(dtype, copy=False)


def _fitting_chunk(spec: ModelSpec, dtype: np.dtype) -> int:
    """The engine's tokens per chunk, fewer when a very wide hidden layer would not fit in
    half the free memory; refused when not even one token fits."""
    ffn = spec.ffn
    rows = default_chunk_tokens(ffn.d_ff)
    free = W.available_memory()
    if free is None:
        return rows
    per_token = W.engine_bytes(spec.d_model, ffn.d_ff, ffn.experts, dtype, 1)
    while rows > 1 and W.engine_bytes(spec.d_model, ffn.d_ff, ffn.experts, dtype, rows) > \
            free // 2:
        rows //= 2
    W.check_working_set(f"one FFN layer of {spec.name} (d_model {spec.d_model:,}, d_ff "
                        f"{ffn.d_ff:,}) on one token", per_token,
                        "shrink it (--d-model, --d-ff, --experts)")
    return rows


def resolve_input(path: Path | None, random: int | None, d_model: int, seed: int) -> TokenInput:
    if (path is None) == (random is None):
        raise InputError("give the tokens: --input FILE (.npy, .txt, .csv) or --random N")
    if path is not None:
        return open_input(path, d_model)
    random = whole("option --random", random, 1)  # at most 2**53: sizes stay exact
    whole("option --seed", seed, 0)
    return RandomTokens(None, (random, d_model), np.dtype(np.float64), seed=seed)


def check_printable(tokens: TokenInput, out: Path | None, as_json: bool) -> None:
    """``--json`` prints the whole output only for small inputs; a larger one needs --out."""
    if as_json and out is None and tokens.n_tokens > SMALL_TOKENS:
        raise InputError(f"--json prints at most {SMALL_TOKENS} output tokens; the input "
                         f"has {tokens.n_tokens:,}: add --out FILE.npy")


def check_in_memory(tokens: TokenInput, dtype: np.dtype, copies: int, what: str) -> None:
    """Refuse to hold ``copies`` copies of the whole input in memory when they would not fit."""
    need = copies * tokens.n_tokens * tokens.d_model * np.dtype(dtype).itemsize
    W.check_working_set(f"{what} on {tokens.n_tokens:,} tokens of d_model {tokens.d_model:,}",
                        need, "give fewer or narrower tokens")


@dataclass(frozen=True)
class RunResult:
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    d_ff: int
    dtype: str
    weights: str
    activation: str
    residual: bool
    head: np.ndarray  # the first output rows (all of them for small inputs)
    out_path: str | None
    checks: dict[str, bool | None] = field(default_factory=dict)  # small inputs; None: the
    # output overflowed to NaN or infinity for finite tokens, and nothing could be compared
    inactive_per_token: list[int] | None = None  # small inputs, dense or gated only
    computed: int = 0  # tokens computed: all, or without --out only the first chunk shown

    @property
    def n_tokens(self) -> int:
        return int(np.prod(self.input_shape[:-1])) if len(self.input_shape) > 1 else 1


def _lesson_checks(ffn: Engine, x: np.ndarray, y: np.ndarray) -> dict[str, bool | None]:
    """The lesson's two prints: one position at a time, and swapped positions. Compared as
    permute-check compares, with the same dtype-aware tolerances (float32 results of one
    token and of many differ in the last bits when BLAS blocks the products differently)."""
    if first_overflow(x, y) is not None:  # NaN equals NaN: the checks would hold vacuously
        return dict.fromkeys(LESSON_CHECKS, None)
    rtol, atol = tolerances(y.dtype, scale=output_scale(y))
    one_by_one = np.vstack([ffn(x[i:i + 1]) for i in range(x.shape[0])])
    swapped = ffn(x[::-1].copy())
    return {
        "same_as_one_position_at_a_time": compare(y, one_by_one, rtol, atol).ok,
        "swapping_positions_only_swaps_the_outputs": compare(y[::-1], swapped, rtol, atol).ok,
    }


def _inactive(ffn: Engine, x: np.ndarray) -> list[int] | None:
    """Hidden units at or below zero before the activation, per token (the lesson's 8 8 7)."""
    if isinstance(ffn.weights, MoEWeights):
        return None
    pre = pre_activation(x.astype(ffn.dtype, copy=False), ffn.weights)
    return [int(v) for v in (pre <= 0).sum(axis=1)]


def run_ffn(model: Model, tokens: TokenInput, *, out: Path | None = None, force: bool = False,
            residual: bool = False, allow_nonfinite: bool = False, head_rows: int = 8,
            progress: Progress | None = None) -> RunResult:
    ffn = model.engine
    dtype = ffn.dtype
    rows = ffn.chunk_tokens
    out_shape = tokens.shape[:-1] + (ffn.d_model,)
    small = tokens.n_tokens <= SMALL_TOKENS
    if not allow_nonfinite and small:
        check_finite(tokens, dtype, rows)  # large inputs are checked chunk by chunk below
    writer = (AtomicNpyWriter(out, out_shape, dtype, force, (tokens.path,))
              if out is not None else None)
    checks: dict[str, bool | None] = {}
    inactive = None
    computed = tokens.n_tokens
    if small:
        x = tokens.matrix(dtype)
        with np.errstate(all="ignore") if allow_nonfinite else nullcontext():
            y = ffn(x)
            checks = _lesson_checks(ffn, x, y)
            inactive = _inactive(ffn, x)
            if residual:
                y += x
        if writer is not None:
            with writer:
                writer.write(y)
        head = y
        if progress:
            progress(tokens.n_tokens)
    else:
        head = np.empty((0, ffn.d_model), dtype=dtype)
        y_bufs = [np.empty((rows, ffn.d_model), dtype=dtype) for _ in range(2)]  # one is written
        ffn.begin(tokens.n_tokens)  # an expert capacity is that of the whole input
        with (writer if writer is not None else nullcontext()):  # while the other is filled
            for i, (start, x) in enumerate(tokens.chunks(rows, dtype,
                                                         finite=not allow_nonfinite)):
                y_buf = y_bufs[i % 2]
                if writer is not None:
                    writer.wait(y_buf)
                y = y_buf[: x.shape[0]]
                ffn.chunk(x, y)
                if residual:
                    np.add(y, x, out=y)
                if head.shape[0] < head_rows:
                    head = np.vstack([head, y[: head_rows - head.shape[0]]])
                if writer is not None:
                    writer.write(y)
                if progress:
                    progress(start + x.shape[0])
                computed = start + x.shape[0]
                if writer is None and head.shape[0] >= head_rows:
                    break  # nothing else is shown or kept: the rest would be work for nothing
    return RunResult(
        input_shape=tokens.shape, output_shape=out_shape, d_ff=ffn.d_ff, dtype=dtype.name,
        weights=model.source, activation=model.spec.ffn.label, residual=residual, head=head,
        out_path=str(out) if out is not None else None, checks=checks,
        inactive_per_token=inactive, computed=computed,
    )
