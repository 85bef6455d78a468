"""``run``: the output's first rows and the lesson's checks as a table, or the JSON document;
``run`` over shards: what was written where."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json, emit_written
from ffncli.present.tables import new_table

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from ffncli.jobs.run import RunResult
    from ffncli.jobs.shards.drivers import ShardedRun


def emit_run(result: RunResult, as_json: bool, precision: int) -> None:
    emit_json(run_json(result), "run") if as_json else print_run(result, precision)


# ---------------------------------------------------------------------------------------------
# run


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def run_json(result: RunResult, max_tokens: int = 1024) -> dict[str, Any]:
    hidden = result.input_shape[:-1] + (result.d_ff,)
    small = result.n_tokens <= max_tokens
    return {
        "input_shape": list(result.input_shape),
        "hidden_shape": list(hidden),
        "output_shape": list(result.output_shape),
        "dtype": result.dtype,
        "activation": result.activation,
        "weights": result.weights,
        "residual": result.residual,
        "output": result.head.reshape(result.output_shape).tolist() if small else None,
        "first_rows": result.head[:8].tolist(),
        "out": result.out_path,
        "checks": result.checks,
        "inactive_per_token": result.inactive_per_token,
    }


def print_run(result: RunResult, precision: int = 4) -> None:
    out = console()
    hidden = result.input_shape[:-1] + (result.d_ff,)
    out.print(f"shape: {_shape(result.input_shape)} -> {_shape(hidden)} -> "
              f"{_shape(result.output_shape)}")
    out.print(Text(f"FFN: {result.activation}{' + residual' if result.residual else ''}, "
                   f"{result.dtype}, weights {result.weights}"))
    shown = result.head.shape[0]
    title = "FFN output" if shown == result.n_tokens else (
        f"FFN output (first {shown} of {result.n_tokens:,} tokens)" if result.computed ==
        result.n_tokens else f"FFN output (first {shown} of {result.n_tokens:,} tokens; only "
        f"the first {result.computed:,} computed: add --out FILE.npy for all)")
    values = [str(j) for j in range(min(result.head.shape[1], 12))]
    # the last columns go first in a narrow terminal (a note says which)
    table = new_table(title, ["token", *values], optional=values[:0:-1])
    for i, row in enumerate(result.head):
        cells = [f"{v:.{precision}f}" for v in row[:12]]
        table.add_row(str(i), *cells)
    out.print(table)
    if result.head.shape[1] > 12:
        out.print(f"(first 12 of {result.head.shape[1]} columns)")
    for key, label in (("same_as_one_position_at_a_time", "same as one position at a time"),
                       ("swapping_positions_only_swaps_the_outputs",
                        "swapping positions only swaps the outputs")):
        if key in result.checks:
            verdict = result.checks[key]
            out.print(f"{label}: " + ("not checked (the output overflowed to NaN or infinity)"
                                      if verdict is None else str(verdict)))
    if result.inactive_per_token is not None:
        counts = " ".join(str(c) for c in result.inactive_per_token[:32])
        more = " ..." if len(result.inactive_per_token) > 32 else ""
        out.print(f"hidden units switched off per token (pre-activation <= 0): [{counts}{more}]")
    if result.out_path:
        out.print(Text(f"wrote {result.out_path} {_shape(result.output_shape)} {result.dtype}"))


def emit_sharded_run(done: ShardedRun, as_json: bool) -> None:
    """``run`` over shards: what was written where, and the shards left out (on stderr)."""
    emit_written(done, as_json, "run-shards", {"weights": done.source}, "",
                 f"weights {done.source}")
