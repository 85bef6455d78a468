"""``permute-check``: each property's result as a table, or its JSON document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json
from ffncli.present.tables import new_table

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from ffncli.analysis.properties import CheckReport, PropertyResult


def emit_check(report: CheckReport, as_json: bool) -> None:
    emit_json(check_json(report), "permute-check") if as_json else print_check(report)


# ---------------------------------------------------------------------------------------------
# permute-check


def check_json(report: CheckReport) -> dict[str, Any]:
    return {
        "target": report.target,
        "passed": report.passed,
        "tokens": report.tokens,
        "input_shape": list(report.input_shape),
        "d_model": report.d_model,
        "dtype": report.dtype,
        "framework": report.framework,
        "mode": report.mode,
        "notes": list(report.notes),
        "bitwise": report.bitwise,
        "skipped": list(report.skipped),
        "explanation": report.explanation,
        "properties": [{
            "name": p.name, "passed": p.passed, "trials": p.trials, "max_abs": p.max_abs,
            "max_rel": p.max_rel, "rtol": p.rtol, "atol": p.atol, "atol_scaled": p.atol_scaled,
            "worst_token": p.worst_token,
            "bit_identical": p.bit_identical, "counterexample": p.counterexample,
        } for p in report.properties],
    }


def max_rel(p: PropertyResult) -> str:
    """The largest relative deviation, or "-" where none means anything (no |expected|
    compared is above its atol)."""
    return "-" if p.max_rel is None else f"{p.max_rel:.3g}"


SCALE_RULE = "s = max(1, c, m) per output column: c its largest |output|, m the lower median of c"


def tolerance(p: PropertyResult) -> str:
    """The rule, with its figures: atol as given, or the default scaled per output column
    (``SCALE_RULE`` says how)."""
    if p.atol_scaled:
        return f"|got - expected| <= atol * s + rtol * |expected|, rtol {p.rtol:g}, atol {p.atol:g}"
    return f"|got - expected| <= atol + rtol * |expected|, rtol {p.rtol:g}, atol {p.atol:g}"


def print_check(report: CheckReport) -> None:
    out = console()
    out.print(Text(f"permute-check {report.target}: {report.tokens:,} tokens of d_model "
                   f"{report.d_model}, {report.dtype}"
                   + (f" ({report.framework})" if report.framework != "numpy" else "")))
    for note in report.notes:
        out.print(Text(f"  {note}"))
    table = new_table("properties", ("property", "result", "trials", "max abs", "max rel",
                                  "worst token", "bit-identical"),
                      optional=("worst token", "bit-identical", "trials"))
    for p in report.properties:
        table.add_row(p.name, "PASS" if p.passed else "FAIL", str(p.trials), f"{p.max_abs:.3g}",
                      max_rel(p), str(p.worst_token) if p.max_abs else "-",
                      "yes" if p.bit_identical else "no")
    out.print(table)
    first = report.properties[0]
    out.print(f"tolerance: {tolerance(first)}"
              + (", and bit-identical (--bitwise)" if report.bitwise else ""))
    if first.atol_scaled:
        out.print(f"  {SCALE_RULE}")
    for p in report.properties:
        if p.counterexample:
            out.print(Text(f"{p.name} FAILED: {p.counterexample}"))
    if report.skipped:
        out.print(Text(f"not checked, as the function is random: {', '.join(report.skipped)}"))
        out.print("NOT checked: the function is random")
    else:
        if report.explanation:
            out.print(Text(f"why, most often: {report.explanation}"))
        out.print("position-wise: every property holds" if report.passed else
                  "NOT position-wise: see the failures above")
