"""``relu-stats`` and ``capture``: the statistics of one FFN (per token, per unit, overlap, hot
units, W2 work saved), the sweep of every layer, a capture's files, as tables or JSON."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json, emit_written, print_skipped, skipped_json
from ffncli.present.tables import bar_table, commas, new_table, pct

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from rich.console import Console

    from ffncli.analysis.sparsity import SparsityResult
    from ffncli.jobs.capture import CaptureResult
    from ffncli.jobs.shards.drivers import ShardedCapture, ShardedStats, ShardedSweep
    from ffncli.jobs.sweep import SweepResult


def emit_stats(result: SparsityResult, as_json: bool, weights: str | None = None) -> None:
    """``weights``: where the FFN's weights came from (its layer), for the header."""
    emit_json(stats_json(result), "relu-stats") if as_json else print_stats(result, weights)


def emit_sweep(result: SweepResult, as_json: bool) -> None:
    doc = sweep_json(result)
    if as_json:
        emit_json(doc, "relu-stats-sweep")
        return
    print_sweep(doc)
    if len(result.layers) == 1:  # one layer: its full statistics too
        print_stats(result.layers[0].stats)


def emit_capture(result: CaptureResult, as_json: bool) -> None:
    emit_json(capture_json(result), "capture") if as_json else print_capture(result)


# ---------------------------------------------------------------------------------------------
# relu-stats


def stats_json(r: SparsityResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "d_ff": r.d_ff,
        "d_model": r.d_model,
        "experts": r.experts,
        "top_k": r.top_k,
        "activation": r.activation,
        "definition": r.rule.description,
        "threshold": r.rule.threshold,
        "tokens": r.tokens,
        "inactive_per_token": r.inactive_per_token,
        "mean_inactive_fraction": r.mean_inactive_fraction,
        "dead_units": r.dead_units,
        "always_active_units": r.always_active_units,
        "w2_macs_per_token": r.w2_macs_per_token,
        "w2_macs_saved_per_token": r.w2_macs_saved_per_token,
    }
    if r.experts == 1:
        s = r.stats[0]
        doc.update(activity_histogram=s.activity_histogram(),
                   aggregated_sparsity=s.aggregated_sparsity(),
                   hot_unit_coverage=s.hot_unit_coverage(),
                   overlap=s.overlap_summary())
    else:
        doc["per_expert"] = [{
            "expert": e, "tokens": s.tokens, "mean_inactive_fraction": s.mean_inactive_fraction,
            "dead_units": len(s.dead_units), "always_active_units": len(s.always_active_units),
            "hot_unit_coverage": s.hot_unit_coverage(),
        } for e, s in enumerate(r.stats)]
    if r.pairwise_overlap is not None:
        doc["pairwise_overlap"] = r.pairwise_overlap
    return doc


def print_stats(r: SparsityResult, weights: str | None = None) -> None:
    out = console()
    moe = f", {r.experts} experts, top-{r.top_k} (units numbered expert * d_ff + unit)" \
        if r.experts > 1 else ""
    out.print(Text(f"relu-stats: {r.tokens:,} tokens, d_ff {r.d_ff}, {r.activation}{moe}"))
    if weights is not None:
        out.print(Text(f"weights: {weights}"))
    out.print(Text(r.rule.description))
    slots = r.d_ff * r.top_k
    shown = r.inactive_per_token[:32]
    out.print(f"inactive hidden units per token (of {slots}): [{' '.join(map(str, shown))}"
              f"{' ...' if len(r.inactive_per_token) > 32 else ''}]")
    out.print(f"mean inactive fraction: {r.mean_inactive_fraction:.1%}")
    out.print(f"dead on these {r.tokens:,} tokens (never active): "
              f"{_some_units(r.dead_units)}")
    out.print(f"active for every token: {_some_units(r.always_active_units)}")
    out.print(f"W2 multiply-adds skipped by leaving out inactive units: "
              f"{r.w2_macs_saved_per_token:,.0f} of {r.w2_macs_per_token:,} per token "
              f"({r.w2_macs_saved_per_token / r.w2_macs_per_token:.1%})")
    if r.experts == 1:
        _print_units(out, r)
    else:
        _print_experts(out, r)
    if r.pairwise_overlap is not None and r.tokens > 1:
        _print_pairs(out, r)


def _print_units(out: Console, r: SparsityResult) -> None:
    """A dense or gated FFN's units: how often each is active, the share unused by the first
    t tokens, the hot units, and the overlap of consecutive tokens' inactive sets."""
    s = r.stats[0]
    histogram = s.activity_histogram()
    units = [int(str(row["units"])) for row in histogram]
    largest = max(units, default=0) or 1  # the largest bin is a full bar
    out.print(bar_table(out, "units by how often they are active", ("active for", "units"),
                         [(str(row["bin"]), str(n))
                          for row, n in zip(histogram, units, strict=True)],
                         [n / largest for n in units]))
    aggregated = s.aggregated_sparsity()
    out.print(bar_table(out, "aggregated sparsity: units unused by all of the first t "
                         "tokens", ("t", "unused share"),
                         [(f"{row['tokens']:,}", pct(row["unused_share"]))
                          for row in aggregated],
                         [row["unused_share"] for row in aggregated], track=True))
    coverage = s.hot_unit_coverage()
    out.print(bar_table(out, "hot units: the fewest units carrying a share of all "
                         "activations", ("share of activations", "units", "share of units"),
                         [(pct(row["share"]), str(row["units"]), pct(row["unit_share"]))
                          for row in coverage],
                         [row["unit_share"] for row in coverage], track=True))
    ov = s.overlap_summary()
    if ov["pairs"] and r.small_masks is None:
        out.print(f"overlap of consecutive tokens' inactive sets: Jaccard "
                  f"{ov['mean_jaccard']:.3f} ± {ov['std_jaccard']:.3f}; shared "
                  f"{ov['mean_shared']:.1f} units vs {ov['mean_shared_by_chance']:.1f} "
                  "by chance")


def _print_experts(out: Console, r: SparsityResult) -> None:
    table = new_table("per expert", ("expert", "tokens", "inactive", "dead", "always active"))
    for e, s in enumerate(r.stats):
        table.add_row(str(e), f"{s.tokens:,}", pct(s.mean_inactive_fraction),
                      str(len(s.dead_units)), str(len(s.always_active_units)))
    out.print(table)


def _print_pairs(out: Console, r: SparsityResult) -> None:
    """The inactive units every two of a few tokens share, against what chance gives."""
    assert r.pairwise_overlap is not None
    table = new_table("shared inactive units between tokens", ("tokens", "shared", "Jaccard",
                                                            "by chance"))
    for row in r.pairwise_overlap:
        table.add_row(f"{row['a']} & {row['b']}", str(row["shared"]),
                      f"{row['jaccard']:.3f}", f"{row['by_chance']:.1f}")
    out.print(table)


UNITS_LISTED = 20  # units named in a line of relu-stats; the rest are counted


def _some_units(units: list[int]) -> str:
    """``3 units [1, 5, 9]``; past UNITS_LISTED, the first UNITS_LISTED and how many more
    there are: ``301 units [0, 1, 2, 3, ..., 19, …, and 281 more]``."""
    if not units:
        return "0 units"
    shown = ", ".join(map(str, units[:UNITS_LISTED]))
    more = len(units) - UNITS_LISTED
    return f"{len(units):,} units [{shown}{f', …, and {more:,} more' if more > 0 else ''}]"


def hot_units(layer: dict[str, Any], share: float = 0.8) -> dict[str, Any] | None:
    """The row of a stats document's hot-unit coverage for ``share`` (None for a mixture of
    experts, whose coverage is per expert)."""
    return next((row for row in layer.get("hot_unit_coverage", ())
                 if abs(row["share"] - share) < 1e-9), None)


def sweep_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row of text per layer of a relu-stats sweep document (see :func:`print_sweep`)."""
    rows: list[tuple[str, ...]] = []
    for layer in doc["layers"]:
        hot = hot_units(layer)
        ov = layer.get("overlap") or {}
        cats = layer.get("cats_threshold_50")
        paired = bool(ov.get("pairs"))
        rows.append((str(layer["layer"]), commas(layer["tokens"]),
                     pct(layer["mean_inactive_fraction"]), commas(len(layer["dead_units"])),
                     commas(len(layer["always_active_units"])),
                     "-" if hot is None else f"{hot['units']:,} ({pct(hot['unit_share'])})",
                     f"{ov['mean_jaccard']:.3f}" if paired else "-",
                     f"{ov['mean_shared']:,.1f}" if paired else "-",
                     f"{ov['mean_shared_by_chance']:,.1f}" if paired else "-",
                     "-" if cats is None else f"{cats:.4g}"))
    return rows


SWEEP_COLUMNS = ("layer", "tokens", "inactive", "dead", "always active", "80% of activations",
                 "Jaccard", "shared", "by chance", "CATS T at 50%")
# left out in this order in a narrow terminal (the overlap's detail first)
SWEEP_OPTIONAL = ("by chance", "shared", "Jaccard", "CATS T at 50%", "80% of activations")


def print_sweep(doc: dict[str, Any]) -> None:
    """The summary of a relu-stats sweep, one row per layer: the mean inactive fraction (with
    a bar), dead and always-active units (on ``tokens`` tokens), the fewest units carrying 80%
    of activations, the mean Jaccard index of consecutive tokens' inactive sets with the units
    they share against what two random sets of their sizes share, and the CATS threshold that
    makes half the activated values inactive."""
    out = console()
    out.print(Text(f"relu-stats: {doc['model']} on {doc['source']}: {doc['tokens']:,} tokens in "
                   f"{doc['sequences']:,} sequences"))
    out.print(Text(str(doc["definition"])))
    out.print(bar_table(out, "every layer's FFN on its real input", SWEEP_COLUMNS,
                         sweep_rows(doc),
                         [layer["mean_inactive_fraction"] for layer in doc["layers"]], after=2,
                         track=True, optional=SWEEP_OPTIONAL))


# ---------------------------------------------------------------------------------------------
# relu-stats --text: a row per layer; capture


def sweep_json(r: SweepResult) -> dict[str, Any]:
    return {
        "model": r.model,
        "source": r.source,
        "tokens": r.tokens,
        "sequences": r.sequences,
        "definition": r.definition,
        "layers": [{"layer": s.layer, **stats_json(s.stats),
                    "cats_threshold_50": s.cats_threshold_50} for s in r.layers],
    }


def capture_json(r: CaptureResult) -> dict[str, Any]:
    return dataclasses.asdict(r)


def print_capture(r: CaptureResult) -> None:
    out = console()
    out.print(Text(f"capture: {r.model}, {r.tokens:,} tokens in {r.sequences:,} sequences"))
    out.print(Text(f"wrote {len(r.files)} files of ({r.tokens}, {r.d_model}) float32 and "
                   f"capture.json to {r.out}"))


# ---------------------------------------------------------------------------------------------
# The same over shards: the merged result, the shards counted, those left out (on stderr).


def emit_sharded_stats(out: ShardedStats, as_json: bool) -> None:
    if as_json:
        doc = stats_json(out.result)
        doc.update(shards=out.shards, skipped=skipped_json(out.skipped))
        emit_json(doc, "relu-stats")
    else:
        print_stats(out.result)
    print_skipped(out.skipped)


def emit_sharded_sweep(out: ShardedSweep, as_json: bool) -> None:
    if as_json:
        doc = sweep_json(out.result)
        doc.update(shards=out.shards, skipped=skipped_json(out.skipped))
        emit_json(doc, "relu-stats-sweep")
    else:
        emit_sweep(out.result, False)
    print_skipped(out.skipped)


def emit_sharded_capture(done: ShardedCapture, as_json: bool) -> None:
    emit_written(done, as_json, "capture-shards",
                 {"model": done.model, "layers": list(done.layers)},
                 f", layers {done.layers[0]}-{done.layers[-1]}", f"model {done.model}")
