"""permute-check --junit-xml (present/junit.py): one testcase per property, the counterexample
as a failure's message, an error report when the code under test misbehaves; the report never
written over an input, replaced atomically, last run's kept when it cannot be."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from helpers.checks import IMPL, run_check
from impls import ffns

from ffncli.base import files
from ffncli.errors import Interrupted, OutputError
from ffncli.jobs import permute
from ffncli.present import junit as render

TESTS = Path(__file__).parent
PRESETS = TESTS.parent / "presets"
CONFIGS = TESTS / "data" / "configs"


@pytest.mark.slow
def test_cli_impl_pass_and_fail_with_junit(cli, tmp_path, in_tests):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--d-model", "6", "--random", "20")
    assert (r.code, r.err) == (0, "") and "position-wise: every property holds" in r.out
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", "impls.ffns:position_bias", "--d-model", "6",
            "--random", "20", "--junit-xml", junit, "--json")
    assert r.code == 1
    doc = r.json()
    failed = [p["name"] for p in doc["properties"] if not p["passed"]]
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == str(len(failed))
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [p["name"] for p in doc["properties"]]
    assert [c.get("name") for c in cases if c.find("failure") is not None] == failed
    assert len(failed) == 3


def test_junit_failure_carries_the_counterexample():
    x = np.random.default_rng(0).normal(size=(5, 6))
    report = run_check(ffns.position_bias, x)
    root = ET.fromstring(render.junit_xml(report))
    failures = {c.get("name"): c.find("failure") for c in root.iter("testcase")}
    eq = report.properties[1]
    assert failures[eq.name].get("message") == eq.counterexample
    assert failures[eq.name].text.startswith(f"max abs deviation {eq.max_abs:.3g}, ")


def test_junit_failure_states_the_tolerance_and_a_max_rel_that_means_something():
    """Outputs that differ only where they are (near) zero: max rel is '-', not |d| / 0 (it
    was 1.8e+308); the tolerance is the rule that applied, atol as given or scaled."""
    x = np.random.default_rng(0).normal(size=(5, 6))

    def drops_alone(X):  # a token alone gives 0.25 where its output should be exactly 0
        y = np.zeros((X.shape[0], 6))
        if X.shape[0] == 1:
            y[:, 0] = 0.25
        return y

    for kw, rule in (({}, "tolerance |got - expected| <= atol * s + rtol * |expected|, rtol "
                          "1e-07, atol 1e-07 (s = max(1, c, m) per output column: c its "
                          "largest |output|, m the lower median of c), "),
                     ({"atol": 0.1}, "tolerance |got - expected| <= atol + rtol * |expected|, "
                                     "rtol 1e-07, atol 0.1, ")):
        report = run_check(drops_alone, x, **kw)
        prop = {p.name: p for p in report.properties}["token_independence"]
        assert (prop.passed, prop.max_abs, prop.max_rel) == (False, 0.25, None)
        failure = {c.get("name"): c.find("failure")
                   for c in ET.fromstring(render.junit_xml(report)).iter("testcase")}
        assert failure["token_independence"].text.startswith(
            f"max abs deviation 0.25, max rel -, {rule}worst token 4, ")


# --- --junit-xml never writes over an input -------------------------------------------------


def _tokens(path: Path, n: int = 5, d: int = 6) -> Path:
    np.save(path, np.random.default_rng(0).normal(size=(n, d)))
    return path


def _collision(cli, tmp_path, args, victim: Path, what: str, junit: Path | None = None):
    before = victim.read_bytes()
    junit = victim if junit is None else junit
    r = cli("permute-check", *args, "--junit-xml", junit)
    assert (r.code, r.out, r.err) == (2, "", f"error: option --junit-xml: {junit} is an input "
                                             f"of this command (the {what}); choose another "
                                             f"path\n")
    assert victim.read_bytes() == before
    assert sorted(p.name for p in victim.parent.iterdir() if p.name.endswith(".tmp")) == []


def test_junit_xml_is_not_the_input_file(cli, tmp_path, in_tests):
    x = _tokens(tmp_path / "x.npy")
    args = ("--impl", "impls.ffns:good", "--d-model", "6", "--input", x)
    _collision(cli, tmp_path, args, x, "--input file")
    os.symlink(x, tmp_path / "link.xml")
    os.link(x, tmp_path / "hard.xml")
    for other in (tmp_path / "." / "x.npy", tmp_path / "sub" / ".." / "x.npy",
                  tmp_path / "link.xml", tmp_path / "hard.xml"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        _collision(cli, tmp_path, args, x, "--input file", junit=other)
    assert (tmp_path / "link.xml").is_symlink()


def test_junit_xml_is_not_the_preset_config_or_weights(cli, tmp_path):
    preset = tmp_path / "mine.yaml"
    shutil.copy(PRESETS / "tiny.yaml", preset)
    _collision(cli, tmp_path, ("--preset", preset, "--random", "4"), preset, "--preset file")
    config = tmp_path / "config.json"
    shutil.copy(CONFIGS / "gpt2.config.json", config)
    _collision(cli, tmp_path, ("--config", config, "--d-model", "24", "--d-ff", "32",
                               "--random", "4"), config, "--config file")
    rng = np.random.default_rng(0)
    weights = tmp_path / "w.npz"
    np.savez(weights, w1=rng.normal(size=(4, 16)), b1=np.zeros(16), w2=rng.normal(size=(16, 4)),
             b2=np.zeros(4))
    _collision(cli, tmp_path, ("--preset", "tiny", "--weights", weights, "--random", "4"),
               weights, "--weights file")
    _collision(cli, tmp_path, ("--preset", "tiny", "--weights", weights, "--random", "4"),
               config, "config.json beside the --weights")


def test_junit_xml_is_not_the_impl_source(cli, tmp_path, monkeypatch):
    (tmp_path / "myffn.py").write_text("import numpy as np\n\ndef f(x):\n    return x * 2\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "myffn", raising=False)
    _collision(cli, tmp_path, ("--impl", "myffn:f", "--d-model", "3", "--random", "4"),
               tmp_path / "myffn.py", "--impl module's source", junit=Path("myffn.py"))
    sys.modules.pop("myffn", None)


def test_junit_xml_replaces_last_run_s_report(cli, tmp_path, in_tests):
    junit = tmp_path / "report.xml"
    junit.write_text("last run's report")
    os.chmod(junit, 0o600)
    args = ("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", junit)
    assert cli(*args).code == 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "0", "0")
    umask = os.umask(0)
    os.umask(umask)
    assert junit.stat().st_mode & 0o777 == 0o666 & ~umask  # a new file, as open() makes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]


def test_junit_xml_through_a_symlink_writes_where_it_points(cli, tmp_path, in_tests):
    (tmp_path / "reports").mkdir()
    link = tmp_path / "report.xml"
    os.symlink(tmp_path / "reports" / "r.xml", link)  # dangling: created, as open() would
    assert cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", link).code == 0
    assert link.is_symlink() and ET.parse(tmp_path / "reports" / "r.xml").getroot() is not None


@pytest.mark.slow
def test_junit_xml_of_a_misbehaving_impl_is_an_error_report(cli, tmp_path, in_tests):
    """Last run's passing report must not stay behind looking like this run's."""
    junit = tmp_path / "report.xml"
    assert cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", junit).code == 0
    r = cli("permute-check", "--impl", "impls.ffns:exits", *IMPL, "--junit-xml", junit)
    assert r.code == 2
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
    error = suite.find("testcase").find("error")
    assert "error: " + error.get("message") + "\n" == r.err
    assert error.get("type") == "ImplError"


# Only files made here: a bug must not get the chance to replace /dev/null (as root, it can).
@pytest.mark.parametrize("make,message", [
    (lambda t: t / "nope" / "r.xml", "folder {t}/nope does not exist"),
    (lambda t: (os.mkfifo(t / "fifo"), t / "fifo")[1], "{t}/fifo is not a regular file (a FIFO, "
     "socket or device); expected a file path"),
])
def test_junit_xml_bad_paths(cli, tmp_path, in_tests, make, message):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", make(tmp_path))
    assert (r.code, r.out) == (2, "")
    assert r.err == "error: option --junit-xml: " + message.format(t=tmp_path) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["fifo"])


def test_junit_xml_directory(cli, tmp_path, in_tests):
    with pytest.raises(OutputError, match=r"^option --junit-xml: .* is a directory; expected a "
                                          r"file path$"):
        permute.check_report_path(tmp_path, [])
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", tmp_path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1 and "directory" in r.err


@pytest.mark.slow
@pytest.mark.parametrize("fail,message", [
    ("new_file", "cannot write in {t}: Permission denied"),
    ("os.fsync", "cannot write {t}/report.xml: No space left on device"),
    ("os.replace", "cannot write {t}/report.xml: Permission denied"),
])
def test_junit_xml_write_failures_leave_last_report(cli, tmp_path, in_tests, monkeypatch,
                                                     fail, message):
    junit = tmp_path / "report.xml"
    junit.write_text("last run's report")
    code = errno.ENOSPC if fail == "os.fsync" else errno.EACCES

    def broken(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(f"ffncli.base.files.{fail}", broken)
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml", junit)
    assert (r.code, r.out) == (2, "")
    assert r.err == "error: option --junit-xml: " + message.format(t=tmp_path) + "\n"
    assert junit.read_text() == "last run's report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]


def test_junit_xml_interrupted_while_writing_leaves_last_report(tmp_path, monkeypatch):
    junit = tmp_path / "report.xml"
    junit.write_text("last run's report")

    def interrupted(*args):
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(Interrupted):
        files.write_text_atomically(junit, "<new/>", "--junit-xml")
    assert junit.read_text() == "last run's report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]


def test_junit_xml_named_like_a_built_in_preset(cli, tmp_path, monkeypatch):
    """`--preset tiny` reads the built-in preset, not a file ./tiny: a report may be named so."""
    monkeypatch.chdir(tmp_path)
    r = cli("permute-check", "--preset", "tiny", "--random", "4", "--junit-xml", "tiny")
    assert r.code == 0
    assert ET.parse(tmp_path / "tiny").getroot().find("testsuite").get("tests") == "4"


def test_junit_error_report_with_control_characters_is_valid_xml(cli, tmp_path, in_tests):
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", "impls.ffns:raises_control_characters", *IMPL,
            "--junit-xml", junit)
    message = (r"impls.ffns:raises_control_characters raised ValueError: "
               r"bad\x00byte\x1b[31m\nsecond line")
    assert (r.code, r.err) == (2, f"error: {message}\n")
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert error.get("message") == message


def test_junit_xml_name_too_long_is_one_line(cli, in_tests, tmp_path):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml",
            tmp_path / ("a" * 300 + ".xml"))
    assert r.code == 2 and r.err.count("\n") == 1
    assert r.err.startswith("error: option --junit-xml: cannot use ") and "too long" in r.err


def test_junit_xml_is_never_a_file_of_the_weights_folder(cli, tmp_path):
    """--junit-xml is checked as --report is, against every file of a weights folder: it
    replaced the checkpoint's model.safetensors (exit 0) when permute-check kept its own list
    of inputs."""
    folder = tmp_path / "gpt2"
    shutil.copytree(TESTS / "data" / "forward" / "gpt2", folder)
    before = (folder / "model.safetensors").read_bytes()
    target = folder / "model.safetensors"
    r = cli("permute-check", "--weights", folder, "--random", "3", "--junit-xml", target)
    assert (r.code, r.err) == (2, f"error: option --junit-xml: {target} is an input of this "
                                  "command (the --weights folder's model.safetensors); choose "
                                  "another path\n")
    assert (folder / "model.safetensors").read_bytes() == before
