"""The --impl sandbox (analysis/guard.py): code under test that exits, hangs, returns NaN or
changes its input ends in exit 2 and one error line, never a pass; its outputs are copied as
they come, the caller's input is never changed, and --timeout bounds each call and the import."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import processes
from helpers.checks import IMPL
from impls import ffns

from ffncli import errors
from ffncli.analysis import guard
from ffncli.errors import ImplError, Interrupted

TESTS = Path(__file__).parent


# --- the implementation misbehaves: exit 2, one line, whatever it does -----------------------


@pytest.mark.slow
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
    ("returns_none", "impls.ffns:returns_none returned NoneType; expected one array of shape "
     "(20, d_out)"),
    ("returns_list", "impls.ffns:returns_list returned a list of 20 (list, list, list, list, "
     "...); expected one array of shape (20, d_out)"),
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_sigterm_during_the_impl_exits_143(tmp_path):
    """SIGTERM to ffncli while the code under test runs (in its child): exit 143, and the
    child is killed with its whole group."""
    pids = tmp_path / "pids"
    ffncli = processes.gate("impls.children:sleeps", pids, *IMPL)
    child = processes.wait_for_pids(pids, 1)[0]
    ffncli.send_signal(signal.SIGTERM)
    out, err = ffncli.communicate(timeout=60)
    assert (ffncli.returncode, out, err) == (128 + signal.SIGTERM, "",
                                             "error: interrupted by SIGTERM\n")
    assert not processes.alive(child)


@pytest.mark.slow
def test_the_impl_killing_its_own_process_is_exit_2(tmp_path):
    (tmp_path / "selfkill.py").write_text(
        "import os, signal\n\ndef f(x):\n    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    import time\n    time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl",
                           "selfkill:f", *IMPL], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (2, "error: selfkill:f crashed: its process was "
                                              "killed by SIGTERM (terminated) instead of "
                                              "returning its output\n")


@pytest.mark.slow
@pytest.mark.parametrize("impl,message", [
    ("impls.ffns", "option --impl: expected package.module:NAME, got 'impls.ffns'"),
    ("impls.nothere:f", "option --impl: cannot import module 'impls.nothere' (No module named "
     "'impls.nothere')"),
    ("impls.ffns:missing", "option --impl: module 'impls.ffns' has no attribute 'missing'"),
    ("impls.ffns:D_FF", "option --impl: impls.ffns:D_FF is not callable"),
    ("impls.ffns:wrong_shape", "impls.ffns:wrong_shape returned shape (19, 6) for input "
     "(20, 6); expected (20, d_out)"),
    ("impls.ffns:returns_list", "impls.ffns:returns_list returned a list of 20"),
    ("impls.ffns:raises", "impls.ffns:raises raised RuntimeError: boom"),
    ("impls.ffns:make_nothing", "option --impl: impls.ffns:make_nothing gave int, which is not "
     "callable"),
])
def test_cli_bad_impl_exit_2(cli, in_tests, impl, message):
    r = cli("permute-check", "--impl", impl, "--d-model", "6", "--random", "20")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: " + message) and r.err.count("\n") == 1, r.err


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_forked_worker_s_os_exit_is_its_own_and_real(tmp_path):
    """In the caller's process (pytest): a multiprocessing worker forked while the FFN runs
    ends with os._exit, which must end it, not unwind into the caller's code and run the rest
    of it (the test session) as a copy."""
    script = ("import os, numpy as np\n"
              "from impls import children\n"
              "from ffncli.testing import assert_position_wise\n"
              "me = os.getpid()\n"
              "try:\n"
              "    assert_position_wise(children.forks_a_pool, np.ones((6, 6)) / 3)\n"
              "    print('passed', os.getpid() == me)\n"
              "except BaseException as exc:\n"
              "    print(type(exc).__name__, os.getpid() == me)\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=TESTS, capture_output=True,
                       text=True, timeout=120, check=False)
    assert (p.returncode, p.stdout) == (0, "passed True\n"), p.stderr


@pytest.mark.parametrize("args, line", [
    (("--d-model", "0"), "option --d-model: expected a whole number >= 1, got 0"),
    (("--d-model", "6", "--trials", "10001"),
     "option --trials: expected a whole number from 0 to 10000, got 10001"),
])
def test_impl_sizes_are_checked(cli, in_tests, args, line):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--random", "4", *args)
    assert (r.code, r.err) == (2, f"error: {line}\n")


# --- the guard in the library --------------------------------------------------------------


def test_guard_copies_outputs_and_never_changes_the_caller_s_input():
    ffns._LAST.clear()
    x = np.random.default_rng(8).normal(size=(4, 6))
    call = guard.guarded(ffns.returns_last_output, "f", x.dtype)
    first = call(x)
    call(2 * x)  # overwrites the array it returned the first time
    np.testing.assert_array_equal(first, ffns.good(x))
    kept = x.copy()
    with pytest.raises(errors.ImplError, match="changed its input in place"):
        guard.guarded(ffns.changes_input, "f", x.dtype)(x)
    np.testing.assert_array_equal(x, kept)


def test_guard_allows_nonfinite_output_only_for_nonfinite_tokens():
    x = np.random.default_rng(9).normal(size=(4, 6))
    x[2, 1] = np.nan
    y = guard.guarded(ffns.good, "g", x.dtype)(x)  # --allow-nonfinite: NaN in, NaN out
    assert np.isnan(y[2]).all() and np.isfinite(np.delete(y, 2, axis=0)).all()

    def leaks(X):
        out = ffns.good(X)
        out[3] = np.nan
        return out

    with pytest.raises(errors.ImplError, match=r"^f returned NaN in output row 3 for a finite "
                                               r"token \(a call on 4 tokens\)"):
        guard.guarded(leaks, "f", x.dtype)(x)


def test_nan_on_a_later_call_is_left_to_the_property_that_asked():
    """The first call's outputs are the reference: NaN there is exit 2, as nothing can be
    compared with them. A later call's NaN (one token alone, normalised by a deviation of 0)
    comes back as it is, and the comparison with the reference fails: it was exit 2 too,
    'returned NaN ... (a call on 1 tokens)', where the function is simply not position-wise."""
    x = np.random.default_rng(9).normal(size=(4, 6))

    def nan_alone(X):
        return ffns.good(X) * (np.nan if X.shape[0] == 1 else 1.0)

    call = guard.guarded(nan_alone, "f", x.dtype)
    np.testing.assert_array_equal(call(x), ffns.good(x))
    assert np.isnan(call(x[:1])).all()
    with pytest.raises(errors.ImplError, match=r"^f returned NaN in output row 0 for a finite "
                                               r"token \(a call on 1 tokens\)"):
        guard.guarded(nan_alone, "f", x.dtype)(x[:1])


def test_guard_is_importable_without_the_cli():
    """The core API: an ImplError, not a SystemExit, for a caller in a notebook."""
    with pytest.raises(ImplError, match=r"^f called sys.exit\(0\) instead of returning its "
                                        r"output$"):
        guard.guarded(ffns.exits, "f", np.dtype(np.float64))(np.ones((2, 6)))


# --- --timeout ------------------------------------------------------------------------------


@pytest.mark.slow
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


@pytest.mark.slow
def test_load_timeout_bounds_the_import(cli, in_tests):
    started = time.monotonic()
    r = cli("permute-check", "--impl", "impls.hang_on_import:f", *IMPL, "--timeout", "0.5",
            "--load-timeout", "1")
    assert time.monotonic() - started < 20
    assert (r.code, r.err) == (2, "error: option --impl: importing and building "
                                  "impls.hang_on_import:f did not finish within the "
                                  "--load-timeout of 1 s\n")


def test_the_load_limit_is_generous_and_its_own():
    """import torch alone takes seconds: 120 s at least, ten calls' worth past that; none
    without --timeout; --load-timeout as given."""
    from ffncli.analysis.isolate import load_limit

    assert (load_limit(None), load_limit(0.5), load_limit(30), load_limit(0.5, 3)) == \
        (None, 120, 300, 3)


@pytest.mark.slow
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
    ("0", "0.0"), ("-1", "-1.0"), ("-0.5", "-0.5"), ("1e-400", "0.0"),  # underflows to 0.0
])
def test_timeout_values_refused(cli, in_tests, value, shown):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, f"--timeout={value}")
    assert (r.code, r.out, r.err) == (2, "", "error: option --timeout: expected a positive "
                                             f"number, got {shown}\n")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_timeout_non_numbers_refused_as_typed(cli, in_tests, value):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, f"--timeout={value}")
    assert (r.code, r.out, r.err) == (2, "", "error: option '--timeout': expected a number "
                                             f"such as 0.5 or 1e-6, got {value!r}\n")


def test_timeout_refused_without_setitimer(cli, in_tests, monkeypatch):
    monkeypatch.delattr(signal, "setitimer")
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--timeout", "1")
    assert (r.code, r.err) == (2, "error: option --timeout: not available on this platform (it "
                                  "needs signal.setitimer)\n")
    assert cli("permute-check", "--impl", "impls.ffns:good", *IMPL).code == 0


@pytest.mark.parametrize("value", ["1e-300", "0.0009"])
def test_a_timeout_too_short_to_arm_is_refused(cli, in_tests, value):
    r = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--timeout", value)
    assert (r.code, r.err) == (2, f"error: option --timeout: expected at least 0.001 seconds, "
                                  f"got {float(value):g}\n")


def test_a_timeout_outside_the_main_thread_is_refused_not_blamed_on_the_ffn():
    """SIGALRM works in the main thread only: from another, ffncli.permute_check(timeout=...)
    said 'f raised ValueError: signal only works in main thread', an ImplError of the FFN."""
    import threading

    import ffncli

    caught: list[BaseException] = []

    def check() -> None:
        try:
            ffncli.permute_check(ffns.good, np.ones((4, 6)), timeout=5)
        except BaseException as exc:  # handed to the main thread
            caught.append(exc)

    thread = threading.Thread(target=check)
    thread.start()
    thread.join(60)
    assert [type(e) for e in caught] == [errors.InputError]
    assert str(caught[0]) == ("timeout: works in the main thread only (it needs "
                              "SIGALRM), not in this one")  # the library's word (issue 41 §3)


# --- a plain class or factory: built, then checked ------------------------------------------


@pytest.mark.slow
def test_a_plain_class_is_built_with_impl_args_and_a_factory_is_called(cli, in_tests):
    built = cli("permute-check", "--impl", "impls.ffns:Scaled", "--impl-args", '{"scale": 2}',
                *IMPL, "--json")
    plain = cli("permute-check", "--impl", "impls.ffns:good", *IMPL, "--json")
    factory = cli("permute-check", "--impl", "impls.ffns:make_good", *IMPL, "--json")
    assert (built.code, plain.code, factory.code) == (0, 0, 0)
    assert _verdicts(factory) == _verdicts(plain)  # the factory returns good itself
    scaled = {p["name"]: p["max_abs"] for p in built.json()["properties"]}
    assert all(scaled[p["name"]] == pytest.approx(2 * p["max_abs"], abs=1e-15)
               for p in plain.json()["properties"])  # the same deviations, twice the outputs
    r = cli("permute-check", "--impl", "impls.ffns:good", "--impl-args", "{}", *IMPL)
    assert (r.code, r.err) == (2, "error: option --impl-args: impls.ffns:good is a function of "
                                  "the tokens, not a class or a factory; --impl-args is for "
                                  "those\n")
