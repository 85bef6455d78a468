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
