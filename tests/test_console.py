"""The terminal's bars (present/console.py): drawn in eighths of a cell, scaled to the largest
value, shortened or dropped on a narrow terminal, uncoloured under NO_COLOR; params keeps its
lines beside them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.terminal import eighths as _eighths

from ffncli.present import console

# ---------------------------------------------------------------------------------------------
# Terminal bars.


def test_bar_in_eighths():
    assert console.bar(0.5, 10) == "█████"
    assert console.bar(0.55, 10) == "█████▌"  # 44 eighths
    assert console.bar(1 / 80, 10) == "▏"
    assert console.bar(0.5, 4, track=True) == "██░░"
    assert console.bar(1.7, 3) == "███" and console.bar(-1.0, 3, track=True) == "░░░"
    assert console.bar(0.0, 5) == ""
    for share in np.linspace(0, 1, 37):
        assert _eighths(console.bar(float(share), 13)) == round(share * 13 * 8)


def _rows(out: str, title: str) -> list[list[str]]:
    """The cells of the table under ``title`` in printed output."""
    lines = out.splitlines()
    title_at = next(i for i, line in enumerate(lines) if line.startswith(title))
    start = next(i for i in range(title_at, len(lines)) if "┃" in lines[i]) + 2  # the rule
    rows = []
    for line in lines[start:]:
        if "│" not in line:
            break
        rows.append([c.strip() for c in line.split("│")])
    return rows


def test_histogram_bars_scale_to_the_largest_bin(cli):
    args = ("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--random",
            "400")
    doc = cli(*args, "--json").json()
    rows = _rows(cli(*args).out, "units by how often they are active")
    units = [b["units"] for b in doc["activity_histogram"]]
    assert [(r[0], int(r[1])) for r in rows] == [(b["bin"], b["units"])
                                                  for b in doc["activity_histogram"]]
    for row, n in zip(rows, units, strict=True):
        assert _eighths(row[2]) == round(n / max(units) * console.BAR_MAX * 8)
    coverage = _rows(cli(*args).out, "hot units:")
    for row, hot in zip(coverage, doc["hot_unit_coverage"], strict=True):
        assert row[3].endswith("░") or hot["unit_share"] == 1.0
        assert _eighths(row[3]) == round(hot["unit_share"] * console.BAR_MAX * 8)


def test_params_keeps_its_lines_and_adds_share_bars(cli):
    out = cli("params", "--preset", "base").out
    assert "share in the FFN:      66.6%\n" in out
    lines = out.splitlines()
    i = lines.index("share in the FFN:      66.6%")
    assert _eighths(lines[i + 1].strip()) == round(0.666071 * console.BAR_MAX * 8)
    parts = {r[0]: r for r in _rows(out, "parameters by part")}
    assert parts["FFN"][1:3] == ["25,196,544", "39.9%"]
    flops = {r[0]: r for r in _rows(out, "FLOPs per token")}
    assert flops["whole model"][5] == "34.7%"
    assert _eighths(flops["whole model"][6]) == round(50331648 / 144842752 * console.BAR_MAX * 8)


@pytest.mark.parametrize("columns", [60, 45, 30])
def test_narrow_terminal_shortens_or_drops_the_bars(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = cli("relu-stats", "--preset", "tiny", "--random", "50").out
    rows = _rows(out, "units by how often")
    assert len(rows) == 12 and all(r[1].isdigit() for r in rows)  # numbers whole, one a line
    widths = [len(r[2]) for r in rows if len(r) > 2]
    assert max(widths, default=0) <= columns - len("never (dead) │     0 │ ")
    assert max(len(line) for line in out.splitlines() if "│" in line) <= columns
    if columns == 30:
        assert all(len(r) == 2 for r in rows)  # fewer than BAR_MIN cells: no bar column
        assert all(len(r) == 3 for r in _rows(out, "hot units"))
    params = cli("params", "--preset", "base").out
    assert "share in the FFN:      66.6%\n" in params
    assert all(len(line) <= columns for line in params.splitlines() if "█" in line)


COLOUR = re.compile(r"\x1b\[([0-9;]*)m")


def _colours(out: str) -> set[str]:
    """The colour codes among the escape sequences (30-37, 38;..., 90-97 foreground)."""
    return {code for codes in COLOUR.findall(out) for code in codes.split(";")
            if re.fullmatch(r"3[0-8]|9[0-7]", code)}


def test_no_color_leaves_the_bars_uncoloured(cli, monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich writes escape sequences as to a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = cli("relu-stats", "--preset", "tiny", "--random", "50").out
    assert _colours(coloured) and "█" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    plain = cli("relu-stats", "--preset", "tiny", "--random", "50").out
    assert not _colours(plain) and "█" in plain
    assert not _colours(cli("params", "--preset", "base").out)
