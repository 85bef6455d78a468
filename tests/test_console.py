"""The terminal's bars (present/tables.py): drawn in eighths of a cell, scaled to the largest
value, shortened or dropped on a narrow terminal, uncoloured under NO_COLOR; params keeps its
lines beside them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from helpers.terminal import cells, in_terminal
from helpers.terminal import eighths as _eighths

from ffncli.present import jsondoc, progress, tables
from ffncli.present import stats as stats_present

# ---------------------------------------------------------------------------------------------
# Terminal bars.


def test_bar_in_eighths():
    assert tables.bar(0.5, 10) == "█████"
    assert tables.bar(0.55, 10) == "█████▌"  # 44 eighths
    assert tables.bar(1 / 80, 10) == "▏"
    assert tables.bar(0.5, 4, track=True) == "██░░"
    assert tables.bar(1.7, 3) == "███" and tables.bar(-1.0, 3, track=True) == "░░░"
    assert tables.bar(0.0, 5) == ""
    for share in np.linspace(0, 1, 37):
        assert _eighths(tables.bar(float(share), 13)) == round(share * 13 * 8)


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
        assert _eighths(row[2]) == round(n / max(units) * tables.BAR_MAX * 8)
    coverage = _rows(cli(*args).out, "hot units:")
    for row, hot in zip(coverage, doc["hot_unit_coverage"], strict=True):
        assert row[3].endswith("░") or hot["unit_share"] == 1.0
        assert _eighths(row[3]) == round(hot["unit_share"] * tables.BAR_MAX * 8)


def test_params_keeps_its_lines_and_adds_share_bars(cli):
    out = cli("params", "--preset", "base").out
    assert "share in the FFN:      66.6%\n" in out
    lines = out.splitlines()
    i = lines.index("share in the FFN:      66.6%")
    assert _eighths(lines[i + 1].strip()) == round(0.666071 * tables.BAR_MAX * 8)
    parts = {r[0]: r for r in _rows(out, "parameters by part")}
    assert parts["FFN"][1:3] == ["25,196,544", "39.9%"]
    flops = {r[0]: r for r in _rows(out, "FLOPs per token")}
    assert flops["whole model"][5] == "34.7%"
    assert _eighths(flops["whole model"][6]) == round(50331648 / 144842752 * tables.BAR_MAX * 8)


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


# ---------------------------------------------------------------------------------------------
# Tables that fit: a figure is never cut, in a real terminal 60, 80 or 120 columns wide.


def test_fit_widths_leaves_out_optional_columns_then_wraps_text():
    headers = ["name", "family", "total"]
    cells = [["mixtral-8x7b", "tiny"], ["transformer", "ffn"], ["46,702,792,704", "148"]]
    # natural: 12 + 11 + 14 and two gaps of 3 = 43
    assert tables.fit_widths(headers, cells, [1], 43) == ([0, 1, 2], {0: 12, 1: 11, 2: 14})
    # 42: family goes (it is optional) rather than fold "transformer"
    assert tables.fit_widths(headers, cells, [1], 42) == ([0, 2], {0: 12, 2: 14})
    # not optional: the text column gives up cells, down to its longest word (11)
    assert tables.fit_widths(headers, cells, [], 42) == ([0, 1, 2], {0: 12, 1: 11, 2: 14})
    # narrower than every figure: figures stay whole (the table is wider than asked)
    kept, widths = tables.fit_widths(headers, cells, [], 20)
    assert kept == [0, 1, 2] and widths[0] == 12 and widths[2] == 14


def test_fit_widths_folds_text_longer_than_a_word_limit():
    long = "x" * 30
    assert tables.fit_widths(["part", "n"], [[long], ["7"]], [], 30)[1] == {0: 26, 1: 1}
    # 15 leaves 11 cells: the word folds, but at no fewer than TEXT_MAX
    assert tables.fit_widths(["part", "n"], [[long], ["7"]], [], 15)[1] == {
        0: tables.TEXT_MAX, 1: 1}


WIDTHS = (60, 80, 120)


def _left_out(text: str) -> set[str]:
    """The columns a table's note says were left out to fit."""
    notes = re.findall(r"\(left out to fit \d+ columns: ([^;]*);", " ".join(text.split()))
    return {name.strip() for note in notes for name in note.split(",")}


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_presets_table_keeps_every_figure_whole(cli, columns):
    code, text = in_terminal(["presets"], columns)
    assert code == 0 and "…" not in text
    shown = cells(text)
    for p in cli("presets", "--json").json()["presets"]:
        assert {p["name"], str(p["d_model"]), str(p["d_ff"]), f"{p['total_params']:,}"} <= shown
    assert max(len(line) for line in text.splitlines()) <= columns
    if columns == 120:
        assert not _left_out(text) and "transformer" in shown and "geglu (gelu_tanh)" in shown
    else:
        assert _left_out(text) and _left_out(text) <= {"family", "activation"}


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_params_tables_keep_every_figure_whole(cli, columns):
    code, text = in_terminal(["params", "--preset", "llama3-8b"], columns)
    assert code == 0 and "…" not in text
    doc = cli("params", "--preset", "llama3-8b", "--json").json()
    shown = cells(text)
    figures = {doc["total_params"], *doc["groups"].values(), *doc["memory_bytes"].values(),
               *doc["kv_cache"]["bytes"].values(), *doc["kv_cache"]["bytes_per_token"].values(),
               doc["flops_per_token"]["ffn"], doc["flops_per_token"]["total"]}
    assert {f"{f:,}" for f in figures if f} <= shown
    layer = doc["layers"][0]
    assert {f"{r['params']:,}" for r in layer["ffn_rows"] + layer["attention_rows"]} <= shown
    assert max(len(line) for line in text.splitlines()) <= columns


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_run_table_shows_whole_values_and_names_the_columns_left_out(cli, tmp_path, columns):
    x = np.random.default_rng(0).standard_normal((5, 512)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, text = in_terminal(["run", "--preset", "base", "--input", str(tmp_path / "x.npy")],
                             columns)
    assert code == 0 and "…" not in text
    rows = cli("run", "--preset", "base", "--input", tmp_path / "x.npy", "--json").json()
    left_out = _left_out(text)
    shown = cells(text)
    assert max(len(line) for line in text.splitlines()) <= columns
    for j in range(12):
        column = {f"{row[j]:.4f}" for row in rows["first_rows"]}
        assert (str(j) in left_out) != (column <= shown), j
    # the first columns stay, the last go first: 0 to 11 (7 cells each) do not fit in 120
    assert "0" not in left_out and "11" in left_out


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_relu_stats_sweep_keeps_tokens_inactive_and_dead(cli, columns):
    case = DATA / "forward" / "bert"
    args = ["relu-stats", "--weights", str(case), "--ids", str(case / "ids.txt"),
            "--layer", "all"]
    code, text = in_terminal(args, columns)
    assert code == 0 and "…" not in text
    doc = cli(*args, "--json").json()
    shown = cells(text)
    assert max(len(line) for line in text.splitlines()) <= columns
    left_out = _left_out(text)
    assert left_out <= set(stats_present.SWEEP_OPTIONAL)
    for layer in doc["layers"]:
        assert {f"{layer['tokens']:,}", f"{layer['mean_inactive_fraction']:.1%}",
                f"{len(layer['dead_units']):,}", f"{len(layer['always_active_units']):,}"} <= shown
        if "CATS T at 50%" not in left_out:
            assert f"{layer['cats_threshold_50']:.4g}" in shown


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_permute_check_table_keeps_its_figures(cli, tmp_path, columns):
    x = np.random.default_rng(1).standard_normal((5, 512)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    args = ["permute-check", "--preset", "base", "--input", str(tmp_path / "x.npy")]
    code, text = in_terminal(args, columns)
    assert code == 0 and "…" not in text
    shown = cells(text)
    for p in cli(*args, "--json").json()["properties"]:
        assert {p["name"], "PASS", f"{p['max_abs']:.3g}", f"{p['max_rel']:.3g}"} <= shown
    assert max(len(line) for line in text.splitlines()) <= columns


# ---------------------------------------------------------------------------------------------
# The progress bar: on stderr when it is a terminal, once the job has run DELAY seconds.


class _Terminal:
    """A stderr that says it is a terminal, and keeps what is written to it."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("not a real terminal")


def _bar_run(monkeypatch, *, enabled=True, tty=True, seconds=(0.0, 3.0, 4.0)) -> str:
    """A Bar over 6 tokens x 2 layers, its updates at ``seconds`` after the start."""
    stderr = _Terminal()
    if not tty:
        stderr.isatty = lambda: False  # type: ignore[method-assign]
    monkeypatch.setattr(progress.sys, "stderr", stderr)
    clock = iter([0.0, *seconds, seconds[-1]])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with progress.Bar(enabled=enabled) as bar:
        bar.start(12, "tokens x layers", per=2)
        for done in (4, 8, 10)[:len(seconds)]:
            bar.update(done)
    return stderr.text


def test_the_bar_shows_tokens_per_second_once_the_job_has_run_two_seconds(monkeypatch):
    text = _bar_run(monkeypatch)
    # at 3 s, 8 of 12 token-layers: 4 tokens in 3 s; at 4 s, 5 tokens in 4 s
    # the last frame (Rich redraws at 10 Hz: the frames between may not be drawn)
    assert "tokens x layers" in text and "10/12" in text
    assert re.search(r"\b1 tokens/s", text)  # 5 tokens in 4 s, a whole number
    assert re.search(r"\d:\d\d:\d\d|-:--:--", text)  # the time left
    assert _bar_run(monkeypatch, seconds=(0.5, 1.0, 1.5)) == ""  # done within DELAY


def test_no_bar_when_quiet_or_stderr_is_not_a_terminal(monkeypatch):
    assert _bar_run(monkeypatch, enabled=False) == ""
    assert _bar_run(monkeypatch, tty=False) == ""


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_turns_the_commands_bar_off(cli, monkeypatch, quiet):
    """relu-stats with and without --quiet on a terminal, the bar due at once: drawn, or not."""
    drawn = []

    class Drawn:
        def update(self, *args, **kwargs) -> None:
            drawn.append(kwargs["completed"])

    def show(self) -> None:
        self._bar = Drawn()

    monkeypatch.setattr(progress.Bar, "DELAY", 0.0)
    monkeypatch.setattr(progress.Bar, "_show", show)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True, raising=False)
    r = cli("relu-stats", "--preset", "tiny", "--random", "20000", "--json",  # 3 chunks
            *(["--quiet"] if quiet else []))
    assert r.code == 0 and r.json()["tokens"] == 20_000
    assert drawn == ([] if quiet else [8192, 16384, 20000])


# ---------------------------------------------------------------------------------------------
# --json is strict JSON: NaN and infinity are written as null, listed under "nonfinite".


def _strict(text: str) -> dict:
    """json.loads as a strict parser reads: NaN, Infinity and -Infinity are errors."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


NONFINITE_DOCS = [  # (id, document, the same as written, its nonfinite note)
    ("nan", {"a": float("nan")}, {"a": None},
     {"count": 1, "first": [{"path": "a", "value": "NaN"}]}),
    ("nested", {"x": [[1.0, float("inf")], [float("-inf"), 2]], "y": {"z": (float("nan"),)}},
     {"x": [[1.0, None], [None, 2]], "y": {"z": [None]}},
     {"count": 3, "first": [{"path": "x[0][1]", "value": "Infinity"},
                            {"path": "x[1][0]", "value": "-Infinity"},
                            {"path": "y.z[0]", "value": "NaN"}]}),
    ("many", {"output": [float("nan")] * 25}, {"output": [None] * 25},
     {"count": 25, "first": [{"path": f"output[{i}]", "value": "NaN"} for i in range(10)]}),
]


@pytest.mark.parametrize("doc,written,note", [c[1:] for c in NONFINITE_DOCS],
                         ids=[c[0] for c in NONFINITE_DOCS])
def test_json_is_strict_nonfinite_values_are_null_with_a_note(capsys, doc, written, note):
    jsondoc.emit_json(doc, "run")
    got = _strict(capsys.readouterr().out)
    assert got == {"format": "ffncli-run/1", **written, "nonfinite": {
        **note, "note": "NaN and infinity are not JSON: each is written as null"}}


def test_run_json_with_allow_nonfinite_is_strict(cli, tmp_path):
    path = tmp_path / "nan.npy"
    np.save(path, np.array([[1, 2, 3, 4], [np.nan, 0, 0, np.inf]], np.float32))
    r = cli("run", "--preset", "tiny", "--input", path, "--json", "--allow-nonfinite")
    doc = _strict(r.out)
    assert r.code == 0 and all(v is not None for v in doc["output"][0])
    assert doc["nonfinite"]["count"] == 2 * 4  # row 1 of output and of first_rows
    assert doc["nonfinite"]["first"][0] == {"path": "output[1][0]", "value": "NaN"}


# ---------------------------------------------------------------------------------------------
# Output to a file or a pipe: no line is broken (it was at 160 columns, mid-path).


def _piped(*args: str, columns: str | None = None) -> str:
    """ffncli's stdout as a pipe reads it, with COLUMNS unset as a shell leaves it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns is not None:
        env["COLUMNS"] = columns
    p = subprocess.run([sys.executable, "-c", "from ffncli.cli import main; main()", *args],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def long_folder(tmp_path):
    folder = tmp_path / ("d" * 200)  # the weights' line is over 230 characters
    folder.mkdir()
    (folder / "cat.txt").write_text("0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n")
    rng = np.random.default_rng(0)
    np.savez(folder / "w.npz", w1=rng.normal(size=(4, 16)).astype(np.float32),
             b1=np.zeros(16, np.float32), w2=rng.normal(size=(16, 4)).astype(np.float32),
             b2=np.zeros(4, np.float32))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("command, line", [
    ("run", "FFN: relu, float32, weights {}/w.npz"),
    ("relu-stats", "weights: {}/w.npz"),
])
def test_a_pipe_gets_long_lines_whole(long_folder, command, line):
    out = _piped(command, "--preset", "tiny", "--weights", str(long_folder / "w.npz"),
                 "--input", str(long_folder / "cat.txt"))
    assert line.format(long_folder) in out.splitlines()


def test_columns_set_is_a_width_asked_for(long_folder):
    out = _piped("run", "--preset", "tiny", "--weights", str(long_folder / "w.npz"),
                 "--input", str(long_folder / "cat.txt"), columns="80")
    assert max(map(len, out.splitlines())) <= 80


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_the_bar_leaves_room_for_the_terminals_echo_of_ctrl_c(monkeypatch, columns):
    """A bar line as wide as the terminal made the echoed "^C" wrap: Rich then cleared the
    line below it on the way out, and the bar stayed on screen after Ctrl-C."""
    monkeypatch.setenv("COLUMNS", str(columns))
    text = _bar_run(monkeypatch)
    frames = [line for line in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text))
              if line.strip()]
    assert frames and "tokens x layers" in frames[-1]
    assert max(len(line) for line in frames) <= columns - 3


def test_a_signal_as_the_bar_starts_still_clears_it(monkeypatch):
    """The bar's stop is registered before it starts: a signal raised inside Rich's start
    (the refresh thread already running) still stops and clears it."""
    from rich.progress import Progress as RichProgress

    started = RichProgress.start

    def start_then_signal(self) -> None:
        started(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(RichProgress, "start", start_then_signal)
    stopped = []
    real_stop = RichProgress.stop

    def stop(self) -> None:
        stopped.append(self.live.is_started)
        real_stop(self)

    monkeypatch.setattr(RichProgress, "stop", stop)
    with pytest.raises(KeyboardInterrupt):
        _bar_run(monkeypatch)
    assert stopped == [True]


@pytest.mark.slow
def test_experts_tables_fit_80_columns_by_leaving_out_optional_columns():
    """At 80 columns the experts tables leave out their optional columns (and say so) rather
    than run past the terminal; at 200 nothing is left out. Every figure stays whole."""
    case = Path(__file__).parent / "data" / "forward" / "deepseek_v3"
    argv = ["experts", "--weights", str(case), "--ids", str(case / "ids.txt"), "--quiet"]
    code, text = in_terminal(argv, 80)
    assert code == 0 and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert _left_out(text) == {"idlest (x even)"}
    assert not _left_out(in_terminal(argv, 200)[1])
