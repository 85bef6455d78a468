"""``ffncli run`` as a library call: stream the input through one layer's FFN, write or show
the output, and on small inputs the lesson's two checks (one position at a time, swapped
positions) and the inactive units per token."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ffncli.analysis.compare import column_scale, compare, first_overflow, tolerances
from ffncli.compute.build import Model
from ffncli.compute.engine import Engine
from ffncli.compute.ffn import MoEWeights, pre_activation
from ffncli.errors import InputError
from ffncli.formats.npy import AtomicNpyWriter
from ffncli.formats.tokens import TokenInput, check_finite
from ffncli.jobs.progress import Callback
from ffncli.jobs.targets import OUT_OPTIONS

LESSON_CHECKS = ("same_as_one_position_at_a_time", "swapping_positions_only_swaps_the_outputs")
SMALL_TOKENS = 1024  # inputs up to this size get the lesson's checks and a full JSON output



def check_printable(tokens: TokenInput, out: Path | None, as_json: bool) -> None:
    """``--json`` prints the whole output only for small inputs; a larger one needs --out."""
    if as_json and out is None and tokens.n_tokens > SMALL_TOKENS:
        raise InputError(f"--json prints at most {SMALL_TOKENS} output tokens; the input "
                         f"has {tokens.n_tokens:,}: add --out FILE.npy")


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
    rtol, atol = tolerances(y.dtype)
    scale = column_scale(y)
    one_by_one = np.vstack([ffn(x[i:i + 1]) for i in range(x.shape[0])])
    swapped = ffn(x[::-1].copy())
    return {
        "same_as_one_position_at_a_time": compare(y, one_by_one, rtol, atol, scale).ok,
        "swapping_positions_only_swaps_the_outputs": compare(y[::-1], swapped, rtol, atol,
                                                             scale).ok,
    }


def _inactive(ffn: Engine, x: np.ndarray) -> list[int] | None:
    """Hidden units at or below zero before the activation, per token (the lesson's 8 8 7)."""
    if isinstance(ffn.weights, MoEWeights):
        return None
    pre = pre_activation(x.astype(ffn.dtype, copy=False), ffn.weights)
    return [int(v) for v in (pre <= 0).sum(axis=1)]


def _run_small(ffn: Engine, tokens: TokenInput, writer: AtomicNpyWriter | None, residual: bool,
               allow_nonfinite: bool, progress: Callback | None
               ) -> tuple[np.ndarray, dict[str, bool | None], list[int] | None]:
    """A small input in one call: its output (all of it shown), the lesson's checks and the
    inactive units per token."""
    x = tokens.matrix(ffn.dtype)
    with np.errstate(all="ignore") if allow_nonfinite else nullcontext():
        y = ffn(x)
        checks = _lesson_checks(ffn, x, y)
        inactive = _inactive(ffn, x)
        if residual:
            y += x
    if writer is not None:
        with writer:
            writer.write(y)
    if progress:
        progress(tokens.n_tokens)
    return y, checks, inactive


def _run_chunks(ffn: Engine, tokens: TokenInput, writer: AtomicNpyWriter | None, residual: bool,
                allow_nonfinite: bool, head_rows: int, progress: Callback | None
                ) -> tuple[np.ndarray, int]:
    """A large input chunk by chunk: its first ``head_rows`` output rows, and the tokens
    computed (without a writer, only until those rows are had)."""
    dtype, rows = ffn.dtype, ffn.chunk_tokens
    computed = tokens.n_tokens
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
    return head, computed


def run_ffn(model: Model, tokens: TokenInput, *, out: Path | None = None, force: bool = False,
            residual: bool = False, allow_nonfinite: bool = False, head_rows: int = 8,
            progress: Callback | None = None) -> RunResult:
    ffn = model.engine
    dtype = ffn.dtype
    out_shape = tokens.shape[:-1] + (ffn.d_model,)
    small = tokens.n_tokens <= SMALL_TOKENS
    if not allow_nonfinite and small:
        check_finite(tokens, dtype, ffn.chunk_tokens)  # large inputs: chunk by chunk below
    writer = (AtomicNpyWriter(out, out_shape, dtype, force, (tokens.path,), names=OUT_OPTIONS)
              if out is not None else None)
    checks: dict[str, bool | None] = {}
    inactive = None
    computed = tokens.n_tokens
    if small:
        head, checks, inactive = _run_small(ffn, tokens, writer, residual, allow_nonfinite,
                                            progress)
    else:
        head, computed = _run_chunks(ffn, tokens, writer, residual, allow_nonfinite, head_rows,
                                     progress)
    return RunResult(
        input_shape=tokens.shape, output_shape=out_shape, d_ff=ffn.d_ff, dtype=dtype.name,
        weights=model.source, activation=model.spec.ffn.label, residual=residual, head=head,
        out_path=str(out) if out is not None else None, checks=checks,
        inactive_per_token=inactive, computed=computed,
    )
