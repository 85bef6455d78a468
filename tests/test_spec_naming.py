"""Issue 41 §3: the specs name no CLI option. The what-if's errors and a GGUF architecture's
refusal name a library call's parameters (ffncli.load_spec, spec_from_header); the commands
pass their options (jobs.choices.SPEC_OPTIONS), so each bad value gets both wordings."""

from __future__ import annotations

import pytest
from helpers.gguf_files import write_gguf

import ffncli
from ffncli.errors import SpecError, WeightsError
from ffncli.formats.gguf import read_header
from ffncli.jobs.choices import SPEC_OPTIONS
from ffncli.specs.gguf import spec_from_header

# (library keyword arguments, CLI options, what follows the name in both)
HOSTILE = [
    ({"d_ff": 0}, ("--d-ff", "0"), "d_ff", "option --d-ff",
     ": expected a whole number >= 1, got 0"),
    ({"d_model": 500}, ("--d-model", "500"), "d_model", "option --d-model",
     ": 500 is not divisible by the 8 attention heads"),
    ({"seq_len": 0}, ("--seq-len", "0"), "seq_len", "option --seq-len",
     ": expected a whole number >= 1, got 0"),
    ({"multiple_of": 0}, ("--multiple-of", "0"), "multiple_of", "option --multiple-of",
     ": expected a whole number >= 1, got 0"),
    ({"experts": 0}, ("--experts", "0"), "experts", "option --experts",
     ": expected a whole number >= 1, got 0"),
    ({"top_k": 0}, ("--top-k", "0"), "top_k", "option --top-k",
     ": expected a whole number >= 1, got 0"),
    ({"activation": "swiglue"}, ("--activation", "swiglue"), "activation", "option --activation",
     ": expected one of relu, gelu, gelu_tanh, silu, swish, sigmoid, identity, glu, reglu, "
     "geglu, swiglu, bilinear, got 'swiglue' (did you mean 'swiglu'?)"),
]


@pytest.mark.parametrize("kwargs, argv, library, option, rest", HOSTILE,
                         ids=[h[2] for h in HOSTILE])
def test_the_what_if_names_parameters_in_the_library_and_options_in_the_cli(
        cli, kwargs, argv, library, option, rest):
    with pytest.raises(SpecError) as exc:
        ffncli.load_spec(preset="base", **kwargs)
    assert str(exc.value) == library + rest
    r = cli("params", "--preset", "base", *argv)
    assert (r.code, r.out, r.err) == (2, "", f"error: {option}{rest}\n")


def test_match_params_says_how_to_gate_in_each_wording(cli):
    with pytest.raises(SpecError) as exc:
        ffncli.load_spec(preset="base", match_params=True)
    assert str(exc.value) == ("match_params: needs a gated FFN; add activation='swiglu' (or "
                              "'geglu', 'reglu', 'glu', 'bilinear') or gated=True")
    r = cli("params", "--preset", "base", "--match-params")
    assert (r.code, r.err) == (2, "error: option --match-params: needs a gated FFN; add "
                                  "--activation swiglu (or geglu, reglu, glu, bilinear) or "
                                  "--gated\n")


def test_an_unknown_gguf_architecture_names_the_callers_alternative(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path, arch="nosuch")
    header = read_header(path)
    with pytest.raises(WeightsError) as library:
        spec_from_header(header)
    assert str(library.value).endswith(" (or give config=config.json)")
    assert "--" not in str(library.value)
    with pytest.raises(WeightsError) as command:
        spec_from_header(header, SPEC_OPTIONS)
    assert str(command.value) == str(library.value).replace(
        "(or give config=config.json)", "(or give --preset or --config)")
