"""permute-check as a CI gate: code under test that exits, hangs, returns NaN or changes its
input ends in exit 2 and one error line, never a pass; --junit-xml never overwrites an input."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from impls import ffns

from ffncli.analysis import guard
from ffncli.base import files
from ffncli.errors import ImplError, Interrupted, OutputError
from ffncli.jobs import permute

TESTS = Path(__file__).parent
PRESETS = TESTS.parent / "presets"
CONFIGS = TESTS / "data" / "configs"
IMPL = ("--d-model", "6", "--random", "20")


@pytest.fixture
def in_tests(monkeypatch):
    monkeypatch.chdir(TESTS)


# --- the implementation misbehaves: exit 2, one line, whatever it does -----------------------


@pytest.mark.parametrize("impl,message", [
    ("exits", "impls.ffns:exits called sys.exit(0) instead of returning its output"),
    ("exits_bare", "impls.ffns:exits_bare called sys.exit() instead of returning its output"),
    ("hard_exits", "impls.ffns:hard_exits called os._exit(0) instead of returning its output"),
    ("raises_system_exit", "impls.ffns:raises_system_exit called sys.exit(0) instead of "
     "returning its output"),
    ("exits_with_message", "impls.ffns:exits_with_message called sys.exit('done here') instead "
     "of returning its output"),
    ("exits_on_second_call", "impls.ffns:exits_on_second_call called sys.exit(0) instead of "
     "returning its output"),
    ("raises_keyboard_interrupt", "impls.ffns:raises_keyboard_interrupt raised "
     "KeyboardInterrupt"),
    ("raises_generator_exit", "impls.ffns:raises_generator_exit raised GeneratorExit"),
    ("raises_base_exception", "impls.ffns:raises_base_exception raised _Custom: not an "
     "Exception"),
    ("raises", "impls.ffns:raises raised RuntimeError: boom"),
    ("returns_nan", "impls.ffns:returns_nan returned NaN in output row 0 for a finite token "
     "(a call on 20 tokens); the properties cannot be checked on it"),
    ("returns_inf_in_one_row", "impls.ffns:returns_inf_in_one_row returned infinity in output "
     "row 19 for a finite token (a call on 20 tokens); the properties cannot be checked on it"),
    ("returns_none", "impls.ffns:returns_none returned NoneType; expected a numpy array of "
     "shape (20, d_out)"),
    ("returns_list", "impls.ffns:returns_list returned list; expected a numpy array of shape "
     "(20, d_out)"),
    ("returns_1d", "impls.ffns:returns_1d returned shape (20,) for input (20, 6); expected "
     "(20, d_out)"),
    ("wrong_shape", "impls.ffns:wrong_shape returned shape (19, 6) for input (20, 6); expected "
     "(20, d_out)"),
    ("returns_empty", "impls.ffns:returns_empty returned shape (20, 0) for input (20, 6); "
     "expected (20, d_out) with d_out >= 1"),
    ("width_depends_on_tokens", "impls.ffns:width_depends_on_tokens returned shape (1, 5) for "
     "input (1, 6); expected (1, 6), the d_out of its first call"),
    ("returns_complex", "impls.ffns:returns_complex returned dtype complex128; expected real "
     "numbers"),
    ("changes_input", "impls.ffns:changes_input changed its input in place (a call on 20 "
     "tokens); the caller's tokens would be lost: copy them before changing them"),
    ("normalises_input_in_place", "impls.ffns:normalises_input_in_place changed its input in "
     "place (a call on 20 tokens); the caller's tokens would be lost: copy them before "
     "changing them"),
    ("flips_zero_sign", "impls.ffns:flips_zero_sign changed its input in place (a call on 20 "
     "tokens); the caller's tokens would be lost: copy them before changing them"),
    ("returns_input_view", "impls.ffns:returns_input_view changed its input in place (a call "
     "on 20 tokens); the caller's tokens would be lost: copy them before changing them"),
])
def test_misbehaving_impl_exit_2(cli, in_tests, impl, message):
    ffns._LAST.clear()
    ffns.CALLS.clear()
    r = cli("permute-check", "--impl", f"impls.ffns:{impl}", *IMPL)
    assert (r.code, r.out, r.err) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize("module,message", [
    ("exit_on_import", "option --impl: importing 'impls.exit_on_import' called sys.exit(0)"),
    ("interrupt_on_import", "option --impl: importing 'impls.interrupt_on_import' raised "
     "KeyboardInterrupt"),
])
def test_impl_module_misbehaving_on_import_exit_2(cli, in_tests, module, message):
    r = cli("permute-check", "--impl", f"impls.{module}:f", *IMPL)
    assert (r.code, r.out, r.err) == (2, "", f"error: {message}\n")


def _verdicts(r) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "seconds"} for p in r.json()["properties"]]


@pytest.mark.parametrize("impl,same_as", [("returns_input", None), ("reuses_buffer", "good"),
                                          ("returns_last_output", "good")])
def test_views_and_reused_buffers_are_copied(cli, in_tests, impl, same_as):
    """Position-wise functions that return a view of their input or one buffer they overwrite
    call after call: each output is copied as it comes, so they pass with the very deviations
    of the same function without the buffer (without the copy they failed)."""
    ffns._LAST.clear()
    r = cli("permute-check", "--impl", f"impls.ffns:{impl}", *IMPL, "--json")
    assert r.code == 0, r.err
    if same_as is None:  # the identity: exact
        assert all(p["bit_identical"] and p["max_abs"] == 0 for p in r.json()["properties"])
    else:
        assert _verdicts(r) == _verdicts(cli("permute-check", "--impl", f"impls.ffns:{same_as}",
                                             *IMPL, "--json"))


def test_exit_0_of_the_impl_is_exit_2_of_the_console_script(tmp_path):
    """Through main(), as CI runs it: before, run() turned the impl's SystemExit(0) into 0."""
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl",
                           "impls.ffns:exits", *IMPL], cwd=TESTS, capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("error: impls.ffns:exits called sys.exit(0) instead of returning "
                           "its output\n")


def test_ffncli_own_interrupt_is_not_the_impl_s_fault():
    """Interrupted (SIGINT/SIGTERM/SIGHUP caught by ffncli) goes through the guard as is."""
    def interrupted(x):
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        guard.guarded(interrupted, "f", np.dtype(np.float64))(np.ones((2, 3)))
    with pytest.raises(Interrupted):
        guard.guarded(interrupted, "f", np.dtype(np.float64), timeout=30)(np.ones((2, 3)))


def test_sigterm_during_the_impl_exits_143(tmp_path):
    (tmp_path / "selfkill.py").write_text(
        "import os, signal\n\ndef f(x):\n    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    import time\n    time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl",
                           "selfkill:f", *IMPL], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (128 + signal.SIGTERM,
                                              "error: interrupted by SIGTERM\n")


# --- --timeout ------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["hangs", "sleeps", "swallows_and_returns"])
def test_timeout_ends_a_hanging_impl(cli, in_tests, impl):
    started = time.monotonic()
    r = cli("permute-check", "--impl", f"impls.ffns:{impl}", *IMPL, "--timeout", "0.5")
    assert time.monotonic() - started < 20
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: impls.ffns:{impl} did not finish within the --timeout of 0.5 s "
                     f"(a call on 20 tokens)\n")
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # restored
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_timeout_bounds_the_import(cli, in_tests):
    started = time.monotonic()
    r = cli("permute-check", "--impl", "impls.hang_on_import:f", *IMPL, "--timeout", "0.5")
    assert time.monotonic() - started < 20
    assert (r.code, r.err) == (2, "error: option --impl: importing 'impls.hang_on_import' did not "
                                  "finish within the --timeout of 0.5 s\n")


def test_timeout_keeps_good_results(cli, in_tests):
    """A generous limit changes nothing: the same verdict and deviations, no alarm left."""
    for impl, code in (("good", 0), ("position_bias", 1)):
        args = ("permute-check", "--impl", f"impls.ffns:{impl}", *IMPL, "--json")
        plain, limited = cli(*args), cli(*args, "--timeout", "30")
        assert (plain.code, limited.code) == (code, code)
        assert _verdicts(limited) == _verdicts(plain)
    assert cli("permute-check", "--preset", "tiny", "--random", "8", "--timeout", "30").code == 0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_timeout_restores_someone_else_s_timer():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 100.0)
        guard.guarded(ffns.good, "g", np.dtype(np.float64), timeout=5)(np.ones((3, 6)))
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        assert 90 < left <= 100 and not fired
        assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("value,shown", [
    ("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("0", "0.0"), ("-1", "-1.0"),
    ("-0.5", "-0.5"), ("1e-400", "0.0"),  # underflows to 0.0
])
def test_timeout_values_refused(cli, in_tests, value, shown):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, f"--timeout={value}")
    assert (r.code, r.out, r.err) == (2, "", "error: option --timeout: expected a positive "
                                             f"number, got {shown}\n")


def test_timeout_refused_without_setitimer(cli, in_tests, monkeypatch):
    monkeypatch.delattr(signal, "setitimer")
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--timeout", "1")
    assert (r.code, r.err) == (2, "error: option --timeout: not available on this platform (it "
                                  "needs signal.setitimer)\n")
    assert cli("permute-check", "--impl", "impls.ffns:good", *IMPL).code == 0


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
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")
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


@pytest.mark.parametrize("fail,message", [
    ("tempfile.mkstemp", "cannot write in {t}: Permission denied"),
    ("os.fsync", "cannot write {t}/report.xml: No space left on device"),
    ("os.replace", "cannot write {t}/report.xml: Permission denied"),
])
def test_junit_xml_write_failures_leave_last_report(cli, tmp_path, in_tests, monkeypatch,
                                                     fail, message):
    junit = tmp_path / "report.xml"
    junit.write_text("last run's report")
    module, name = fail.split(".")
    code = errno.ENOSPC if name == "fsync" else errno.EACCES

    def broken(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(f"ffncli.base.files.{module}.{name}", broken)
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


def test_guard_is_importable_without_the_cli():
    """The core API: an ImplError, not a SystemExit, for a caller in a notebook."""
    with pytest.raises(ImplError, match=r"^f called sys.exit\(0\) instead of returning its "
                                        r"output$"):
        guard.guarded(ffns.exits, "f", np.dtype(np.float64))(np.ones((2, 6)))


def test_junit_xml_named_like_a_built_in_preset(cli, tmp_path, monkeypatch):
    """`--preset tiny` reads the built-in preset, not a file ./tiny: a report may be named so."""
    monkeypatch.chdir(tmp_path)
    r = cli("permute-check", "--preset", "tiny", "--random", "4", "--junit-xml", "tiny")
    assert r.code == 0
    assert ET.parse(tmp_path / "tiny").getroot().find("testsuite").get("tests") == "3"


def test_junit_error_report_with_control_characters_is_valid_xml(cli, tmp_path, in_tests):
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", "impls.ffns:raises_control_characters", *IMPL,
            "--junit-xml", junit)
    message = (r"impls.ffns:raises_control_characters raised ValueError: "
               r"bad\x00byte\x1b[31m\nsecond line")
    assert (r.code, r.err) == (2, f"error: {message}\n")
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert error.get("message") == message


def test_os_exit_in_a_subprocess_is_exit_2(tmp_path):
    """Through the real console script: os._exit(0) in the FFN under test is not a pass."""
    import subprocess
    import sys

    (tmp_path / "quits.py").write_text("import os\n\ndef f(x):\n    os._exit(0)\n")
    p = subprocess.run([sys.executable, "-c", "from ffncli.cli import main; main()",
                        "permute-check", "--impl", "quits:f", "--d-model", "4", "--random", "6"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == "error: quits:f called os._exit(0) instead of returning its output\n"


@pytest.mark.parametrize("value", ["1e-300", "0.0009"])
def test_a_timeout_too_short_to_arm_is_refused(cli, in_tests, value):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--timeout", value)
    assert (r.code, r.err) == (2, f"error: option --timeout: expected at least 0.001 seconds, "
                                  f"got {float(value):g}\n")


def test_junit_xml_name_too_long_is_one_line(cli, in_tests, tmp_path):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--junit-xml",
            tmp_path / ("a" * 300 + ".xml"))
    assert r.code == 2 and r.err.count("\n") == 1
    assert r.err.startswith("error: option --junit-xml: cannot use ") and "too long" in r.err


@pytest.mark.parametrize("args, line", [
    (("--d-model", "0"), "option --d-model: expected a whole number >= 1, got 0"),
    (("--d-model", "6", "--trials", "10001"),
     "option --trials: expected a whole number from 0 to 10000, got 10001"),
])
def test_impl_sizes_are_checked(cli, in_tests, args, line):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--random", "4", *args)
    assert (r.code, r.err) == (2, f"error: {line}\n")
