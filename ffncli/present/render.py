"""A library result as its command prints it, as text: ``ffncli.render(result, "markdown")``.
The same emitters as the commands (``--format rich|markdown|csv``, ``--json``), their stdout
kept in a string."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

from ffncli.base.validate import brief, suggest
from ffncli.counting.results import ParamsResult
from ffncli.errors import InputError
from ffncli.present.check import emit_check
from ffncli.present.console import TABLE_FORMATS, table_format
from ffncli.present.params import emit_params, emit_presets
from ffncli.present.stats import emit_capture, emit_stats, emit_sweep

RENDERINGS = (*TABLE_FORMATS, "json")


def _perplexity(result: Any, as_json: bool) -> None:
    from ffncli.present.perplexity import emit_perplexity  # its page's modules: only for one

    emit_perplexity(result, as_json)


# What prints each result, by its class's name (their modules import NumPy; a count does not).
EMITTERS: dict[str, Callable[[Any, bool], None]] = {
    "ModelCount": lambda c, as_json: emit_params(ParamsResult(c), as_json),
    "ParamsResult": emit_params,
    "FileOnlyResult": emit_params,
    "CheckReport": emit_check,
    "SparsityResult": emit_stats,
    "SweepResult": emit_sweep,
    "CaptureResult": emit_capture,
    "PerplexityResult": _perplexity,
}


def _emitter(result: Any) -> Callable[[Any, bool], None]:
    if isinstance(result, list | tuple) and result and \
            type(result[0]).__name__ == "PresetSummary":
        return emit_presets
    kind = type(result).__name__
    if kind not in EMITTERS or not type(result).__module__.startswith("ffncli."):
        raise InputError(f"result: expected what an ffncli function returns (count, params, "
                         f"presets, permute_check, relu_stats, layer_stats, capture_inputs, "
                         f"perplexity), got {brief(result)}")
    return EMITTERS[kind]


def render(result: Any, fmt: str = "rich") -> str:
    """``result`` printed as its command prints it, in ``fmt`` (one of RENDERINGS)."""
    if fmt not in RENDERINGS:
        raise InputError(f"format: expected one of {', '.join(RENDERINGS)}, got "
                         f"{brief(fmt)}{suggest(fmt, RENDERINGS)}")
    emit = _emitter(result)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), table_format("rich" if fmt == "json" else fmt):
        emit(result, fmt == "json")
    return out.getvalue()
