"""--layer, one grammar for every command (jobs/choices.py): a layer N, a range A-B or all,
in ASCII digits only, and one layer where a command takes one."""

from __future__ import annotations

import pytest
from helpers.forward_cases import FORWARD, IDS

from ffncli.errors import InputError
from ffncli.jobs.choices import parse_layers


@pytest.mark.parametrize(("text", "n", "layers"), [
    (None, 3, (0, 1, 2)), ("all", 2, (0, 1)), ("1", 3, (1,)), ("0-2", 6, (0, 1, 2)),
    ("4-4", 6, (4,)),
])
def test_layers(text, n, layers):
    assert parse_layers(text, n) == layers


@pytest.mark.parametrize(("text", "message"), [
    ("6", "option --layer: expected layers of 0-5, got '6'"),
    ("2-9", "option --layer: expected layers of 0-5, got '2-9'"),
    ("3-1", "option --layer: the range 3-1 runs backwards; write 1-3"),
    ("-1", "option --layer: expected a layer N, a range A-B or all, got '-1'"),
    ("1-", "option --layer: expected a layer N, a range A-B or all, got '1-'"),
    ("x", "option --layer: expected a layer N, a range A-B or all, got 'x'"),
    (" 1", "option --layer: expected a layer N, a range A-B or all, got ' 1'"),
    ("1" * 5000, "option --layer: expected a layer N, a range A-B or all, got '"
                 + "1" * 27 + "..." + "1" * 28 + "'"),
])
def test_bad_layers(text, message):
    with pytest.raises(InputError) as err:
        parse_layers(text, 6)
    assert str(err.value) == message


def test_a_single_layer_command_refuses_a_range(cli):
    r = cli("relu-stats", "--preset", "tiny", "--random", "3", "--layer", "all")
    assert (r.code, r.err) == (2, "error: option --layer: expected a whole number >= 0, "
                                  "got 'all'\n")


@pytest.mark.parametrize("value", ["\u0663", "\uff11", "\u0661-\u0662", "1-\uff11"])
def test_layers_are_ascii_digits(cli, value):
    """str.isdigit() takes Arabic-Indic and full-width digits: '１' was layer 1."""
    r = cli("relu-stats", "--weights", FORWARD / "gpt2", "--ids", IDS, "--layer", value)
    assert (r.code, r.err) == (2, f"error: option --layer: expected a layer N, a range A-B or "
                                  f"all, got '{value}'\n")


@pytest.mark.parametrize("layer", ["１", "٣", "1.0", "one"])
def test_one_layer_grammar_for_every_command(cli, layer):
    """--layer N takes ASCII digits only, for one layer (run) as for a range (--ids): a
    full-width '１' was layer 1 for run and refused for relu-stats --ids."""
    r = cli("run", "--weights", FORWARD / "llama", "--layer", layer, "--random", "2")
    assert (r.code, r.err) == (2, f"error: option --layer: expected a whole number >= 0, got "
                                  f"'{layer}'\n")
    r = cli("relu-stats", "--weights", FORWARD / "llama", "--ids", FORWARD / "llama" / "ids.txt",
            "--layer", layer)
    assert (r.code, r.err) == (2, "error: option --layer: expected a layer N, a range A-B or "
                                  f"all, got '{layer}'\n")


# ---------------------------------------------------------------------------------------------
# --workers: at most WORKERS_PER_CORE a core, refused before anything starts (no note, no Dask).

_WHY = ("each worker is a process holding its own copy of the weights, and at most one a core "
        "runs at a time")
TOO_MANY_WORKERS = [  # (id, cores, --workers, command, the line)
    ("10000-on-2", 2, "10000", "relu-stats",
     f"option --workers: expected at most 8 (4 a core, 2 cores here: {_WHY}), got 10000"),
    ("9-on-2", 2, "9", "run",
     f"option --workers: expected at most 8 (4 a core, 2 cores here: {_WHY}), got 9"),
    ("5-on-1", 1, "5", "relu-stats",
     f"option --workers: expected at most 4 (4 a core, 1 core here: {_WHY}), got 5"),
    ("million-on-64", 64, "1000000", "run",
     f"option --workers: expected at most 256 (4 a core, 64 cores here: {_WHY}), got 1000000"),
]


@pytest.mark.parametrize("cores,workers,command,line", [c[1:] for c in TOO_MANY_WORKERS],
                         ids=[c[0] for c in TOO_MANY_WORKERS])
def test_too_many_workers_is_one_line_before_anything_starts(cli, tmp_path, monkeypatch, cores,
                                                             workers, command, line):
    import os
    import sys

    import numpy as np

    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setitem(sys.modules, "distributed", None)  # would say "needs the dask package"
    out = ("--out", tmp_path / "y") if command == "run" else ()
    r = cli(command, "--preset", "toy", "--input", tmp_path, *out, "--workers", workers)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")  # and no "note: --workers"
