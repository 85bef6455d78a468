"""YAML presets and JSON configs are read strictly and within bounds: duplicate keys, deep
nesting, alias bombs, NaN and infinity, non-integers, lists where a number or a name belongs,
special files and big files are each one error line naming the file (and the key)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from conftest import CONFIGS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.base.textformats import MAX_TEXT_BYTES, Malformed, parse_json, parse_yaml
from ffncli.counting.model import count
from ffncli.errors import ConfigError, SpecError
from ffncli.specs.archs import load_config
from ffncli.specs.hfconfig import read_config
from ffncli.specs.spec import load_preset, preset_names
from ffncli.specs.table import SUPPORTED_MODEL_TYPES

PRESETS = Path(__file__).parents[1] / "presets"

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


# --- the parsers --------------------------------------------------------------------------------

GOOD_YAML = [
    ("d_model: 4\nffn: {d_ff: 8}\n", {"d_model": 4, "ffn": {"d_ff": 8}}),
    ("base: &b {x: 1, y: 2}\nother: {<<: *b, y: 3}\n",  # merge keys may be overridden
     {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}}),
    ("a: &a [1, 2]\nb: [*a, *a]\n", {"a": [1, 2], "b": [[1, 2], [1, 2]]}),
    ("[" * 63 + "1" + "]" * 63, None),  # 63 levels: fine (64 would be too, 65 is not)
    ("x: .nan\ny: .inf\nz: 1.0e+999\n", None),  # parsed; refused by the preset's key checks
    ("", None),
]


@pytest.mark.parametrize("text,expected", GOOD_YAML, ids=range(len(GOOD_YAML)))
def test_parse_yaml_good(text, expected):
    got = parse_yaml(text)
    if text.startswith("x: .nan"):
        assert got["x"] != got["x"] and got["y"] == got["z"] == float("inf")
    elif text.startswith("["):
        for _ in range(63):
            (got,) = got
        assert got == 1
    else:
        assert got == expected


BAD_YAML = [
    ("a: 1\nb: 2\na: 3\n", " at line 3, column 1", "duplicate key 'a'"),
    ("ffn: {d_ff: 8, d_ff: 9}\n", " at line 1, column 16", "duplicate key 'd_ff'"),
    ("1: a\ntrue: b\n", " at line 2, column 1", "duplicate key True"),  # 1 == True in Python
    (LAUGHS, " at line 5, column 8", "aliases expand to more than 10,000 values"),
    ("[" * 100_000, " at line 1, column 65", "nested deeper than 64 levels"),
    ("".join(" " * i + "-\n" for i in range(100)), " at line 65, column 65",
     "nested deeper than 64 levels"),
    ("- 1\n" * 10_001, " at line 10000, column 3", "the document holds more than 10,000 values"),
    ("a: &a [*a]\n", " at line 1, column 8", "alias *a refers to a node that contains it"),
    ("a: *nowhere\n", " at line 1, column 4", "found undefined alias 'nowhere'"),
    ("a: !!int abc\n", " at line 1, column 4", "'abc' is not a valid int"),
    ("a: !!int ''\n", " at line 1, column 4", "'' is not a valid int"),
    ("a: !!float x\n", " at line 1, column 4", "'x' is not a valid float"),
    ("a: !!bool maybe\n", " at line 1, column 4", "'maybe' is not a valid bool"),
    ("a: !!timestamp soon\n", " at line 1, column 4", "'soon' is not a valid timestamp"),
    ("a: " + "9" * 5000 + "\n", " at line 1, column 4",
     "an integer of 5,000 characters (at most 100 are read)"),
    ("a: " + ":".join(["59"] * 2000) + "\n", " at line 1, column 4",  # base 60, quadratic
     "an integer of 5,999 characters (at most 100 are read)"),
    ("a: b\x00c\n", " at line 1, column 5",
     "unacceptable character #x0000: special characters are not allowed"),
    ("a: 1\n---\nb: 2\n", " at line 2, column 1",
     "expected a single document in the stream, but found another document"),
    ("? [a]\n: 1\n", " at line 1, column 3", "found unhashable key"),
    ("!!python/object/apply:os.system ['echo hacked']\n", " at line 1, column 1",
     "could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("d_model: [\n", " at line 2, column 1", "expected the node content, but found '<stream end>'"),
]


def test_parse_json_good():
    text = '{"a": [1, -2.5e3, "x[[{\\"", null, true], "b": {"c": {}}, "d": "\\u00e9"}'
    assert parse_json(text) == {"a": [1, -2500.0, 'x[[{"', None, True], "b": {"c": {}},
                                "d": "\u00e9"}
    assert parse_json("[" * 64 + "]" * 64) == json.loads("[" * 64 + "]" * 64)
    assert parse_json('["' + "[" * 100_000 + '"]') == ["[" * 100_000]  # brackets in a string


BAD_JSON = [
    ('{"a": 1, "a": 2}', "", "duplicate key 'a'"),
    ('{"a": {"b": 1, "b": 1}}', "", "duplicate key 'b'"),
    ('{"a": 1,\n "b": NaN}', " at line 2, column 7", "NaN is not a number JSON allows"),
    ('{"a": Infinity}', " at line 1, column 7", "Infinity is not a number JSON allows"),
    ('{"a": "NaN", "b": -Infinity}', " at line 1, column 19",
     "-Infinity is not a number JSON allows"),
    ('{"a": "1e999", "b": 1e999}', " at line 1, column 21",
     "number '1e999' is out of range (it rounds to infinity)"),
    ('{"a": -%s}' % ("9" * 5000), " at line 1, column 7",
     "an integer of 5,000 digits (at most 100 are read)"),
    ("[" * 100_000, "", "arrays and objects nested deeper than 64 levels"),
    ('{"a":' * 100_000, "", "arrays and objects nested deeper than 64 levels"),
    ("[" * 65 + "]" * 65, "", "arrays and objects nested deeper than 64 levels"),
    ('{"model_type": "gpt2",', " at line 1, column 23",
     "Expecting property name enclosed in double quotes"),
    ('"' + '\\"' * 100_000, " at line 1, column 1", "Unterminated string starting at"),
    ("", " at line 1, column 1", "Expecting value"),
    ('{"a": "b\x00"}', " at line 1, column 9", "Invalid control character at"),
]


BAD_TEXTS = [(parse_yaml, *case) for case in BAD_YAML] + [(parse_json, *case) for case in BAD_JSON]


@pytest.mark.parametrize("parse,text,where,problem", BAD_TEXTS,
                         ids=[f"{p.__name__}-{i}" for i, (p, *_) in enumerate(BAD_TEXTS)])
def test_bad_texts(parse, text, where, problem):
    with pytest.raises(Malformed) as exc:
        parse(text)
    assert (exc.value.where, exc.value.problem) == (where, problem)


# --- presets and configs through the CLI: one line, exit 2 ----------------------------------------

BAD_PRESETS = [
    ("d_model: 4\nffn: {d_ff: 8}\nd_model: 5\n",
     "invalid YAML at line 3, column 1: duplicate key 'd_model'"),
    ("d_model: 4\nffn: {d_ff: 8, activation: relu, activation: gelu}\n",
     "invalid YAML at line 2, column 34: duplicate key 'activation'"),
    (LAUGHS, "invalid YAML at line 5, column 8: aliases expand to more than 10,000 values"),
    ("d_model: " + "[" * 100_000,
     "invalid YAML at line 1, column 73: nested deeper than 64 levels"),
    ("d_model: 1000000000000000000000000000000\nffn: {d_ff: 8}\n",
     "key 'd_model': expected at most 2**53 (9,007,199,254,740,992), got "
     "1000000000000000000000000000000"),
    ("d_model: 9007199254740993\nffn: {d_ff: 8}\n",
     "key 'd_model': expected at most 2**53 (9,007,199,254,740,992), got 9007199254740993"),
    ("d_model: 512.0\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got 512.0"),
    ("d_model: 4.5\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got 4.5"),
    ("d_model: true\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got True"),
    ("d_model: .nan\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got nan"),
    ("d_model: .inf\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got inf"),
    ("d_model: [4]\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got [4]"),
    ("d_model: {x: 4}\nffn: {d_ff: 8}\n",
     "key 'd_model': expected a whole number >= 1, got {'x': 4}"),
    ("d_model: 4\nffn: {d_ff: 8, beta: .nan}\n",
     "key 'ffn.beta': expected a positive number, got nan"),
    ("d_model: 4\nffn: {d_ff: 8, beta: .inf}\n",
     "key 'ffn.beta': expected a positive number, got inf"),
    ("d_model: 4\nffn: {d_ff: 8, beta: -.inf}\n",
     "key 'ffn.beta': expected a positive number, got -inf"),
    ("d_model: 4\nffn: {d_ff: 8, beta: 1.0e+999}\n",
     "key 'ffn.beta': expected a positive number, got inf"),
    ("d_model: 4\nffn: {d_ff: 8, beta: true}\n",
     "key 'ffn.beta': expected a positive number, got True"),
    ("d_model: 4\nffn: {d_ff: 8, beta: [1]}\n",
     "key 'ffn.beta': expected a positive number, got [1]"),
    ("d_model: 4\nffn: {d_ff: 8, experts: 2, capacity_factor: .nan}\n",
     "key 'ffn.capacity_factor': expected a positive number, got nan"),
    ("d_model: 4\nffn: {d_ff: 8}\ninit: {std: .inf}\n",
     "key 'init.std': expected a positive number, got inf"),
    ("d_model: 4\nffn: {d_ff: 8}\ninit: {seed: -1}\n",
     "key 'init.seed': expected a whole number >= 0, got -1"),
    ("d_model: 4\nffn: {d_ff: 8}\ninit: {seed: 1.5}\n",
     "key 'init.seed': expected a whole number >= 0, got 1.5"),
    ("d_model: 4\nffn: {d_ff: 8, activation: [relu]}\n",
     "key 'ffn.activation': expected a non-empty string, got ['relu']"),
    ("d_model: 4\nffn: {d_ff: 8, activation: {relu: 1}}\n",
     "key 'ffn.activation': expected a non-empty string, got {'relu': 1}"),
    ("name: [a, b]\nd_model: 4\nffn: {d_ff: 8}\n",
     "key 'name': expected a non-empty string, got ['a', 'b']"),
    ("d_model: 4\nffn: {d_ff: 8}\nnorm: {kind: " + "x" * 300 + "}\n",
     "key 'norm.kind': expected one of layernorm, rmsnorm, got '" + "x" * 27 + "..." + "x" * 28
     + "'"),
    ("d_model: 4\nffn: {d_ff: 8, gated: 1}\n", "key 'ffn.gated': expected true or false, got 1"),
    ("d_model: !!int nope\nffn: {d_ff: 8}\n",
     "invalid YAML at line 1, column 10: 'nope' is not a valid int"),
    ("d_model: 4\nffn: {d_ff: 8}\n---\nd_model: 5\n",
     "invalid YAML at line 3, column 1: expected a single document in the stream, but found "
     "another document"),
]


@pytest.mark.parametrize("text,message", BAD_PRESETS, ids=range(len(BAD_PRESETS)))
def test_bad_preset_files(cli, tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    r = cli("params", "--preset", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def _gpt2(**changes: object) -> str:
    return json.dumps({"model_type": "gpt2", "n_embd": 8, "n_layer": 2, "n_head": 2, **changes})


BAD_CONFIGS = [
    ('{"model_type": "gpt2", "n_embd": 768, "n_embd": 1024}',
     "invalid JSON: duplicate key 'n_embd'"),
    # config files read transformers' non-finite numbers as what they mean (issue 40): a NaN
    # where a size belongs is then the key's error
    ('{"model_type": "gpt2", "n_embd": NaN}',
     "key 'n_embd': expected a whole number >= 1, got nan"),
    ('{"model_type": "gpt2", "n_embd": -Infinity}',
     "key 'n_embd': expected a whole number >= 1, got -inf"),
    ('{"model_type": "gpt2", "n_embd": 1e400}',
     "invalid JSON at line 1, column 34: number '1e400' is out of range (it rounds to infinity)"),
    ('{"model_type": "gpt2", "n_embd": %s}' % ("7" * 200),
     "invalid JSON at line 1, column 34: an integer of 200 digits (at most 100 are read)"),
    ('{"model_type": "gpt2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "invalid JSON: arrays and objects nested deeper than 64 levels"),
    (_gpt2(n_embd=10**30), "key 'n_embd': expected at most 2**53 (9,007,199,254,740,992), got "
     "1000000000000000000000000000000"),
    (_gpt2(n_embd=768.0), "key 'n_embd': expected a whole number >= 1, got 768.0"),
    (_gpt2(n_embd=7.5), "key 'n_embd': expected a whole number >= 1, got 7.5"),
    (_gpt2(n_embd=True), "key 'n_embd': expected a whole number >= 1, got True"),
    (_gpt2(n_embd=[768]), "key 'n_embd': expected a whole number >= 1, got [768]"),
    (_gpt2(n_embd={"v": 768}), "key 'n_embd': expected a whole number >= 1, got {'v': 768}"),
    (_gpt2(n_embd="x" * 200),
     "key 'n_embd': expected a whole number >= 1, got '" + "x" * 27 + "..." + "x" * 28 + "'"),
    (_gpt2(n_layer=-12), "key 'n_layer': expected a whole number >= 1, got -12"),
    (_gpt2(tie_word_embeddings=1), "key 'tie_word_embeddings': expected true or false, got 1"),
    (_gpt2(tie_word_embeddings="yes"),
     "key 'tie_word_embeddings': expected true or false, got 'yes'"),
    (_gpt2(activation_function=["relu"]),
     "key 'activation_function': expected an activation name (relu, gelu, gelu_new, gelu_fast, "
     "gelu_pytorch_tanh, silu, swish, sigmoid, linear), got ['relu']"),
    (_gpt2(activation_function={"name": "relu"}),
     "key 'activation_function': expected an activation name (relu, gelu, gelu_new, gelu_fast, "
     "gelu_pytorch_tanh, silu, swish, sigmoid, linear), got {'name': 'relu'}"),
    (_gpt2(_name_or_path=["gpt2"]), "key '_name_or_path': expected a string, got ['gpt2']"),
    ('{"model_type": ["gpt2"]}', "key 'model_type': expected a string such as 'llama', got "
     "['gpt2']"),
    ('{"model_type": "%s"}' % ("x" * 100), "unsupported model_type '" + "x" * 27 + "..."
     + "x" * 28 + "'; supported: " + ", ".join(SUPPORTED_MODEL_TYPES[:8]) + " and "
     + f"{len(SUPPORTED_MODEL_TYPES) - 8} more (docs/specs.md lists them)"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16.0}',
     "key 'head_dim': expected a whole number >= 1, got 16.0"),
    ('{"model_type": "t5", "feed_forward_proj": ["relu"]}',
     "key 'feed_forward_proj': expected a string such as 'relu' or 'gated-gelu', got ['relu']"),
    ('\ufeff{"model_type": "gpt2"}',
     "invalid JSON at line 1, column 1: Unexpected UTF-8 BOM (decode using utf-8-sig)"),
]


@pytest.mark.parametrize("text,message", BAD_CONFIGS, ids=range(len(BAD_CONFIGS)))
def test_bad_config_files(cli, tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    r = cli("params", "--config", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_config_files_read_the_non_finite_numbers_transformers_writes(cli, tmp_path):
    """Mamba-2's config.json holds "time_step_limit": [0.0, Infinity]; every other JSON stays
    strict (a thresholds file, a safetensors index: parse_json's table above)."""
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_embd": 8, "n_layer": 2, "n_head": 2,\n'
                    '"time_step_limit": [0.0, Infinity], "x": -Infinity, "y": NaN,\n'
                    '"layer_norm_epsilon": Infinity}')
    r = cli("params", "--config", path, "--json")
    assert r.code == 0 and json.loads(r.out)["total_params"] == 50257 * 8 + 1024 * 8 + 2 * (
        4 * 8 * 8 + 4 * 8 + 2 * 8 * 32 + 32 + 8 + 4 * 8) + 2 * 8
    data = read_config(path)
    assert data["time_step_limit"] == [0.0, math.inf] and data["x"] == -math.inf
    assert math.isnan(data["y"])
    with pytest.raises(Malformed, match="Infinity is not a number JSON allows"):
        parse_json(path.read_text())


@pytest.mark.parametrize("option,what", [("--preset", "preset file"), ("--config", "config file")])
def test_special_and_big_files_are_refused_before_reading(cli, tmp_path, option, what):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it would block until someone writes
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_TEXT_BYTES + 1))
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"d_model: 4 # \xe9\n")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    cases = [
        (fifo, f"error: {what} is not a regular file (a FIFO, socket or device): {fifo}"),
        (Path("/dev/zero"), f"error: {what} is not a regular file (a FIFO, socket or device): "
                            "/dev/zero"),
        (big, f"error: {what} {big} is 4,194,305 bytes; at most 4,194,304 are read"),
        (latin1, f"error: {latin1}: not a UTF-8 text file"),
        (tmp_path / "none.yaml", f"error: {what} not found: {tmp_path / 'none.yaml'}"),
    ]
    if option == "--preset":  # (Typer's own check stops --config's directories first)
        cases.append((folder, f"error: {what} is a directory, not a file: {folder}"))
    for path, line in cases:
        r = cli("params", option, path)
        assert (r.code, r.out, r.err) == (2, "", line + "\n"), path


def test_a_config_beside_the_weights_goes_through_the_same_reader(cli, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_embd": 8, "n_embd": 8}')
    (tmp_path / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    r = cli("run", "--weights", tmp_path / "model.safetensors", "--random", "2")
    assert (r.code, r.out, r.err) == (
        2, "", f"error: {tmp_path / 'config.json'}: invalid JSON: duplicate key 'n_embd'\n")


def test_every_shipped_preset_and_config_still_loads():
    for name in preset_names():
        assert load_preset(name).name == name
    for path in CONFIGS.glob("*.json"):
        assert load_config(path).d_model >= 1


def test_a_2_53_width_is_accepted_and_counted_exactly(cli, tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_text(f"d_model: {2**53}\nffn: {{d_ff: 1, bias: false}}\n")
    doc = cli("params", "--preset", path, "--json").json()
    assert doc["total_params"] == 2 * 2**53


# --- fuzzing: valid texts, mutated ------------------------------------------------------------

YAML_TEXTS = sorted(p.read_text() for p in PRESETS.glob("*.yaml"))
JSON_TEXTS = sorted(p.read_text() for p in CONFIGS.glob("*.json"))


@st.composite
def mutated(draw, texts: list[str], alphabet: list[str]) -> str:
    """A valid text with a few characters replaced, inserted or deleted, or cut short."""
    text = list(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.integers(0, 3))
        pos = draw(st.integers(0, max(len(text) - 1, 0)))
        char = draw(st.sampled_from(alphabet) | st.characters(codec="utf-8"))
        if kind == 0 and text:
            text[pos] = char
        elif kind == 1:
            text.insert(pos, char * draw(st.integers(1, 3)))
        elif kind == 2 and text:
            del text[pos]
        else:
            del text[pos:]
    return "".join(text)


YAML_SPECIALS = [*":-?[]{},&*!|>'\"%@#\n .~0123456789eE+", "&a ", "*a", "<<: ", "!!int "]
JSON_SPECIALS = [*'{}[]",:.-+eE0123456789 \ntfnNI', "NaN", "Infinity", "1e999"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_presets_and_configs(scratch, data):
    """A spec that counts, or one SpecError (preset) or ConfigError line: nothing else."""
    if data.draw(st.booleans()):
        path, load = scratch / "config.json", load_config
        text = data.draw(mutated(JSON_TEXTS, JSON_SPECIALS))
    else:
        path, load = scratch / "preset.yaml", lambda p: load_preset(str(p))
        text = data.draw(mutated(YAML_TEXTS, YAML_SPECIALS))
    path.write_text(text, encoding="utf-8")
    try:
        count(load(path))
    except (ConfigError, SpecError) as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_parsers_on_random_text(text):
    for parse in (parse_json, parse_yaml):
        try:
            parse(text)
        except Malformed as exc:
            assert "\n" not in exc.problem


ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.integers(-1, 9)
    | st.floats() | st.sampled_from(["relu", "gelu_new", "silu", "rmsnorm", "tied", "gated-gelu"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6)


def _paths(data: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in data.items():
        out.append(prefix + (key,))
        if isinstance(value, dict):
            out.extend(_paths(value, prefix + (key,)))
    return out


def _replace(data: dict, path: tuple, value: object) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_fuzz_values_of_valid_presets_and_configs(data):
    """Any value (NaN, infinity, huge, negative, lists, mappings...) in place of any key of a
    shipped preset or config: a spec that counts, or SpecError/ConfigError. Never coerced:
    where the result is a spec, the value that replaced an integer key is that integer."""
    import yaml

    from ffncli.specs.archs import spec_from_config
    from ffncli.specs.spec import spec_from_mapping

    is_config = data.draw(st.booleans())
    text = data.draw(st.sampled_from(JSON_TEXTS if is_config else YAML_TEXTS))
    doc = json.loads(text) if is_config else yaml.safe_load(text)
    for _ in range(data.draw(st.integers(1, 3))):
        _replace(doc, data.draw(st.sampled_from(_paths(doc))), data.draw(ANY_VALUE))
    try:
        spec = spec_from_config(doc, "c") if is_config else spec_from_mapping(doc, "p")
    except (SpecError, ConfigError) as exc:
        assert "\n" not in str(exc)
        return
    count(spec)
    for value in (spec.d_model, spec.ffn.d_ff, spec.ffn.experts, spec.seq_len):
        assert type(value) is int and 1 <= value <= 2**53


# --- the cells --format markdown|csv writes (issue 39) ------------------------------------------

# (a name, its Markdown cell, its CSV cell): on one line, control characters as escapes; in CSV
# a name a spreadsheet would run as a formula behind a "'" (OWASP), figures as they are
CELLS = [
    ("FFN W1", "FFN W1", "FFN W1"),
    ('=HYPERLINK("http://x","y")', '=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
    ("+1+cmd|' /C calc'!A0", "+1+cmd\\|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "-2+3", "'-2+3"),
    ("@SUM(A1)", "@SUM(A1)", "'@SUM(A1)"),
    ("\t=1", "\\\\t=1", "\\t=1"),  # a tab is escaped, so the cell starts with a backslash
    ("\r=1", "\\\\r=1", "\\r=1"),
    ("a\x1b[31mred\x1b[0m", "a\\\\x1b[31mred\\\\x1b[0m", "a\\x1b[31mred\\x1b[0m"),
    ("two\nlines", "two\\\\nlines", "two\\nlines"),
    ("nul\x00 del\x7f nel\x85", "nul\\\\x00 del\\\\x7f nel\\\\x85", "nul\\x00 del\\x7f nel\\x85"),
    ("sep\u2028rlo\u202eisolate\u2066", "sep\\\\u2028rlo\\\\u202eisolate\\\\u2066",
     "sep\\u2028rlo\\u202eisolate\\u2066"),
    ("a|b\\c", "a\\|b\\\\c", "a|b\\c"),
    ("-0.5", "-0.5", "-0.5"), ("-1,234", "-1,234", "-1,234"), ("+3%", "+3%", "+3%"),
    ("-1.8e+308", "-1.8e+308", "-1.8e+308"), ("-inf", "-inf", "'-inf"), ("-", "-", "-"),
    ("-1 x 2", "-1 x 2", "'-1 x 2"), ("é ü 東京", "é ü 東京", "é ü 東京"),
]


@pytest.mark.parametrize(("name", "markdown", "csv"), CELLS)
def test_table_cells(name, markdown, csv):
    from ffncli.base.textformats import csv_cell, markdown_cell

    assert (markdown_cell(name), csv_cell(name)) == (markdown, csv)


@given(st.text())
def test_one_line_leaves_no_control_character(text):
    import unicodedata

    from ffncli.base.textformats import one_line

    line = one_line(text)
    assert not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in line)
    assert one_line(line) == line  # printable text is left as it is
