"""What the tables print (present/): lists cut with how many more there are; names from files
and presets written as one line, without control characters, and as CSV cells that a
spreadsheet does not take for a formula (issue 39)."""

from __future__ import annotations

import pytest

# ---------------------------------------------------------------------------------------------
# relu-stats: a list of units says how many more there are


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["0", "0.3", "0.6", "1.0"])  # 0, 3, 295, 1,550 dead
def test_a_list_of_units_says_how_many_more_there_are(cli, threshold):
    """The dead units on the line are the --json document's, the first 20 of them, and the
    count of the rest (301 dead units showed 20 and nothing else)."""
    args = ("relu-stats", "--preset", "base", "--random", "20", "--threshold", threshold)
    dead = cli(*args, "--json").json()["dead_units"]
    out = cli(*args).out
    line = next(x for x in out.splitlines() if x.startswith("dead on these"))
    listed = ", ".join(map(str, dead[:20]))
    expected = {0: "0 units", **{n: f"{n} units [{listed}]" for n in range(1, 21)}}.get(
        len(dead), f"{len(dead):,} units [{listed}, …, and {len(dead) - 20:,} more]")
    assert line == f"dead on these 20 tokens (never active): {expected}"
    if threshold == "0.6":  # the line as it was read
        assert line.endswith(": 295 units [9, 21, 22, 24, 32, 40, 48, 57, 64, 71, 77, 78, 80, "
                             "81, 82, 85, 90, 101, 106, 109, …, and 275 more]")


# ---------------------------------------------------------------------------------------------
# --format markdown|csv: names on one line, no control characters, no formula in a CSV cell

EVIL = '=HYPERLINK("http://x","a\x1b[31m|b")\nc'


@pytest.mark.parametrize(("kind", "first"), [
    ("csv", '"\'=HYPERLINK(""http://x"",""a\\x1b[31m|b"")\\nc: d_model 512, d_ff 2048, relu"'),
    ("markdown", '=HYPERLINK("http://x","a\\x1b[31m|b")\\nc: d_model 512, d_ff 2048, relu'),
])
def test_a_preset_s_name_is_one_line_and_no_formula(cli, tmp_path, kind, first):
    """A preset named ``=HYPERLINK(...)`` with an escape sequence and a newline in it: its
    line is one line, the escape written as text, and in CSV a ``'`` before the ``=``."""
    import json
    from pathlib import Path

    preset = tmp_path / "evil.yaml"
    base = (Path(__file__).parents[1] / "presets" / "base.yaml").read_text()
    preset.write_text(base + f"name: {json.dumps(EVIL)}\n")
    r = cli("params", "--preset", preset, "--format", kind)
    assert r.code == 0
    assert r.out.splitlines()[0] == first
    assert not any(c in r.out for c in "\x1b\r\t")
