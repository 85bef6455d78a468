"""What a new user meets first: the command list of `ffncli --help`, a value given without its
option, an option of another command, numbers and paths as typed (issue 39)."""

from __future__ import annotations

import inspect
import json
import re

import pytest

# ---------------------------------------------------------------------------------------------
# `ffncli --help`: one whole sentence per command (at the width conftest pins, 200).


def _command_lines(help_text: str) -> dict[str, list[str]]:
    """The Commands panel of ``ffncli --help``: each command's lines of text."""
    panel = help_text[help_text.index("Commands"):]
    lines: dict[str, list[str]] = {}
    name = ""
    for row in panel.splitlines()[1:]:
        m = re.match(r"[│|] (\S*)\s+(.*?)\s*[│|]$", row)
        if not m:
            continue
        name = m.group(1) or name
        lines.setdefault(name, []).append(m.group(2))
    return lines


def test_each_command_is_one_sentence_in_the_help(cli):
    """The docstring's line breaks used to reach the list ('norms;' / 'the memory ...')."""
    import typer.main

    from ffncli.cli import app

    r = cli("--help")
    assert r.code == 0
    lines = _command_lines(r.out)
    commands = typer.main.get_command(app).commands
    assert set(lines) == set(commands)
    for name, text in lines.items():
        doc = inspect.getdoc(commands[name].callback).split("\n\n")[0]
        assert text == [" ".join(doc.split())], name
    assert lines["params"] == ["Count parameters, FLOPs per token, weight memory and KV cache: "
                               "FFN, attention, norms; the memory of fine-tuning it (--train) "
                               "and what fits (--fit)."]


# ---------------------------------------------------------------------------------------------
# A value without its option: say which option takes it.


@pytest.mark.parametrize("args, line", [
    (("params", "llama3-8b"), "params takes no argument 'llama3-8b': give a preset with "
                              "--preset llama3-8b"),
    (("params", "config.json"), "params takes no argument 'config.json': give a config.json "
                                "with --config config.json"),
    (("params", "my.yaml"), "params takes no argument 'my.yaml': give a YAML spec with --preset "
                            "my.yaml"),
    (("params", "model.safetensors.index.json"), "params takes no argument "
     "'model.safetensors.index.json': give weights with --weights model.safetensors.index.json"),
    (("params", "m.gguf"), "params takes no argument 'm.gguf': give weights with --weights "
                           "m.gguf"),
    (("run", "acts.npy"), "run takes no argument 'acts.npy': give tokens with --input acts.npy"),
    (("run", "cat.txt"), "run takes no argument 'cat.txt': give tokens with --input cat.txt"),
    (("relu-stats", "alice.txt"), "relu-stats takes no argument 'alice.txt': give a text with "
                                  "--text alice.txt"),
    (("capture", "-o", "x", "ids.npy"), "capture takes no argument 'ids.npy': give token ids "
                                        "with --ids ids.npy"),
    (("params", "acts.npy"), "params takes no argument 'acts.npy' (its inputs are options: "
                             "ffncli params --help)"),
    (("presets", "base"), "presets takes no argument 'base' (its inputs are options: ffncli "
                          "presets --help)"),
    (("params", "a b.gguf"), "params takes no argument 'a b.gguf': give weights with --weights "
                             "'a b.gguf'"),
])
def test_a_value_without_its_option_names_the_option(cli, args, line):
    r = cli(*args)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")


def test_a_folder_without_its_option_is_weights(cli, tmp_path):
    r = cli("params", tmp_path)
    assert (r.code, r.err) == (2, f"error: params takes no argument '{tmp_path}': give weights "
                                  f"with --weights {tmp_path}\n")


def test_a_hugging_face_config_given_as_a_preset(cli, tmp_path):
    """'unknown key architectures' said nothing of --config; a .json name was 'unknown preset'."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "hidden_size": 64}))
    r = cli("params", "--preset", config)
    assert (r.code, r.err) == (2, f"error: {config}: a Hugging Face config (it has "
                                  f"'model_type'), not a spec: give it with --config {config}\n")
    only = tmp_path / "arch.yaml"
    only.write_text("architectures: [BertModel]\n")
    r = cli("params", "--preset", only)
    assert (r.code, r.err) == (2, f"error: {only}: a Hugging Face config (it has "
                                  f"'architectures'), not a spec: give it with --config {only}\n")


def test_a_json_name_given_as_a_preset_is_read_as_a_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text('{"model_type": "gpt2"}')
    r = cli("params", "--preset", "c.json")
    assert r.err == ("error: c.json: a Hugging Face config (it has 'model_type'), not a spec: "
                     "give it with --config c.json\n")
    (tmp_path / "spec.json").write_text('{"d_model": 4, "ffn": {"d_ff": 16}}')
    r = cli("params", "--preset", "spec.json", "--json")  # a spec as JSON is YAML too
    assert (r.code, r.json()["total_params"]) == (0, 2 * 4 * 16 + 16 + 4)


# ---------------------------------------------------------------------------------------------
# An option of another command is not a typo of this one's.


@pytest.mark.parametrize("args, line", [
    (("run", "--format", "csv"),
     "run has no option --format: params, relu-stats and experts take it"),
    (("presets", "--preset", "base"), "presets has no option --preset: params, run, "
                                      "permute-check and relu-stats take it"),
    (("capture", "--impl", "m:f"), "capture has no option --impl: permute-check takes it"),
    (("run", "--jsno"), "no such option: --jsno (did you mean '--json'?)"),
    (("--bogus",), "no such option: --bogus"),
])
def test_an_option_of_another_command(cli, args, line):
    r = cli(*args)
    assert (r.code, r.err) == (2, f"error: {line}\n")


# ---------------------------------------------------------------------------------------------
# Numbers as people write them (Python's float() takes '0_5' as 5), paths never empty.

FLOAT_OPTIONS = [("relu-stats", "--target-sparsity"), ("relu-stats", "--threshold"),
                 ("permute-check", "--rtol"), ("permute-check", "--atol"),
                 ("permute-check", "--timeout"), ("run", "--beta"),
                 ("run", "--capacity-factor")]


@pytest.mark.parametrize("command, option", FLOAT_OPTIONS)
@pytest.mark.parametrize("typed", ["0_5", "1_000", "nan", "NaN", "inf", "-infinity", " ", "",
                                   " 1", "1 ", "0x10", "1e", "½", "1,5", "--", "٣"])
def test_a_float_option_takes_only_decimal_numbers(cli, command, option, typed):
    r = cli(command, option, typed)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: option '{option}': expected a number such as 0.5 or 1e-6, got "
               f"{typed!r}\n")


@pytest.mark.parametrize("command, option", FLOAT_OPTIONS)
def test_a_float_too_large_is_refused(cli, command, option):
    r = cli(command, option, "1e400")
    assert (r.code, r.err) == (2, f"error: option '{option}': '1e400' is too large for a "
                                  f"float\n")


@pytest.mark.parametrize("typed, value", [("0.5", 0.5), (".5", 0.5), ("5e-1", 0.5),
                                          ("+0.5", 0.5), ("0.50E0", 0.5)])
def test_decimal_numbers_are_read(cli, typed, value):
    r = cli("relu-stats", "--preset", "tiny", "--random", "40", "--target-sparsity", typed,
            "--json")
    assert r.code == 0, r.err
    assert "(--target-sparsity 0.5: " in r.json()["definition"]
    assert r.json()["mean_inactive_fraction"] == pytest.approx(value)


INT_OPTIONS = [("run", "--seed"), ("run", "--random"), ("permute-check", "--trials"),
               ("params", "--d-ff"), ("params", "--seq-len")]


@pytest.mark.parametrize("command, option", INT_OPTIONS)
@pytest.mark.parametrize("typed", ["1_0", " 3", "3 ", "", "1e3", "3.0", "0x10", "nan", "٣"])
def test_an_integer_option_takes_only_digits(cli, command, option, typed):
    """int() reads '1_0' as 10, ' 3' as 3 and the Arabic-Indic digit three as 3."""
    r = cli(command, option, typed)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: option '{option}': expected a whole number such as 12, got "
               f"{typed!r}\n")


def test_an_integer_option_is_read(cli):
    r = cli("run", "--preset", "tiny", "--random", "+3", "--seed", "007", "--json")
    assert r.code == 0, r.err
    assert r.json()["input_shape"] == [3, 4]


@pytest.mark.parametrize("option, args", [
    ("'--weights'", ("run", "--preset", "tiny", "--random", "3", "--weights", "")),
    ("'--input' / '-i'", ("run", "--preset", "tiny", "--input", "")),
    ("'--config'", ("params", "--config", "")),
    ("'--weights'", ("params", "--weights=")),
    ("'--report'", ("relu-stats", "--preset", "tiny", "--random", "3", "--report", "")),
    ("'--out' / '-o'", ("capture", "--out", "", "--text", "x.txt")),
    ("'--junit-xml'", ("permute-check", "--junit-xml", "")),
])
def test_an_empty_path_is_an_error_of_its_own(cli, option, args):
    """`--weights "$MINILM"` with MINILM unset read the current folder."""
    r = cli(*args)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: option {option}: expected a path, got an empty value\n")


@pytest.mark.parametrize("typed, part", [("0_5", "0_5"), ("0.25,1_0e-1", "1_0e-1"),
                                         ("nan", "nan"), ("0.25,inf", "inf"), ("0.5,", ""),
                                         ("0x1", "0x1")])
def test_perplexitys_shares_are_decimal_numbers(cli, typed, part):
    """perplexity's --target-sparsity is a list (S[,S...]): each share read as above."""
    r = cli("perplexity", "--weights", "m.gguf", "--text", "a.txt", "--sparsify", "cats",
            "--target-sparsity", typed)
    assert (r.code, r.err) == (2, "error: option --target-sparsity: expected shares such as 0.5 "
                                  f"or 0.25,0.5, got {part!r}\n")


@pytest.mark.parametrize("word, line", [
    ("llama3-8b", "no such command 'llama3-8b': to count it, ffncli params --preset llama3-8b"),
    ("config.json", "no such command 'config.json': to count it, ffncli params --config "
                    "config.json"),
    ("model.gguf", "no such command 'model.gguf': to count it, ffncli params --weights "
                   "model.gguf"),
    ("my model.safetensors", "no such command 'my model.safetensors': to count it, ffncli "
                             "params --weights 'my model.safetensors'"),
    ("zzz", "no such command 'zzz' (the commands: ffncli --help)"),
    ("x.npy", "no such command 'x.npy' (the commands: ffncli --help)"),
    ("parms", "no such command 'parms'. Did you mean 'params'?"),
])
def test_a_model_given_without_a_command_names_params(cli, word, line):
    """`ffncli llama3-8b` said only "no such command"."""
    r = cli(word)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")
