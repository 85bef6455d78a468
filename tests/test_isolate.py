"""The code under test in a child process (analysis/isolate.py, analysis/child.py): a C-level
_exit, a segfault, a hang, a loop swallowing BaseException that ignores SIGINT and SIGTERM,
a grandchild left hanging: each is exit 2 with one line, never exit 0, and no process is left
behind. What the child prints never reaches stdout. The frames it sends are checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import processes
from helpers.checks import IMPL

from ffncli.analysis import isolate

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

TESTS = Path(__file__).parent


def _gate(tmp_path: Path, impl: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                            list[int]]:
    """python -m ffncli permute-check --impl impls.IMPL, as CI runs it; its result and the
    pids the code under test recorded (tests/impls/children.py writes them)."""
    pids = tmp_path / "pids"
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl",
                           f"impls.{impl}", *IMPL, "--junit-xml", str(tmp_path / "r.xml"),
                           *args], cwd=TESTS, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FFNCLI_TEST_PIDFILE": str(pids)}, check=False)
    recorded = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    return done, recorded


@pytest.mark.parametrize("impl,args,line", [
    ("children:hard_exit", (), "impls.children:hard_exit ended its process with exit code 0 "
     "(os._exit, or C code calling exit) instead of returning its output"),
    ("children:segfault", (), "impls.children:segfault crashed: its process was killed by "
     "SIGSEGV (segmentation fault) instead of returning its output"),
    ("children:sleeps", ("--timeout", "1"), "impls.children:sleeps did not finish within the "
     "--timeout of 1 s (a call on 20 tokens)"),
    ("children:stubborn", ("--timeout", "1"), "impls.children:stubborn did not finish within "
     "the --timeout of 1 s (a call on 20 tokens)"),
    ("children:spawns_and_hangs", ("--timeout", "1"), "impls.children:spawns_and_hangs did not "
     "finish within the --timeout of 1 s (a call on 20 tokens)"),
    ("children:forks_then_segfaults", (), "impls.children:forks_then_segfaults crashed: its "
     "process was killed by SIGSEGV (segmentation fault) instead of returning its output"),
    ("exit_hard_on_import:f", (), "option --impl: importing and building "
     "impls.exit_hard_on_import:f: ended its process with exit code 0 (os._exit, or C code "
     "calling exit)"),
    ("segfault_on_import:f", (), "option --impl: importing and building "
     "impls.segfault_on_import:f: crashed: its process was killed by SIGSEGV (segmentation "
     "fault)"),
    ("hang_on_import:f", ("--load-timeout", "1"), "option --impl: importing and building "
     "impls.hang_on_import:f did not finish within the --load-timeout of 1 s"),
])
def test_the_child_cannot_pass_the_gate_or_stay_behind(tmp_path, impl, args, line):
    done, pids = _gate(tmp_path, impl, *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {line}\n")
    assert processes.kill_all(pids) == []  # the child and its grandchild are gone
    if impl.startswith("children:"):
        assert len(pids) == (2 if impl in ("children:spawns_and_hangs",
                                           "children:forks_then_segfaults") else 1)
    error = (tmp_path / "r.xml").read_text()
    assert "<error " in error and "<testcase" in error


def test_what_the_child_prints_never_reaches_stdout(tmp_path):
    done, _ = _gate(tmp_path, "children:prints", "--json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["passed"] is True  # one JSON document, nothing else


def test_a_function_using_forked_workers_passes(tmp_path):
    """Its workers end with os._exit: that is theirs, not the code under test's, exiting."""
    done, _ = _gate(tmp_path, "children:forks_a_pool", "--timeout", "60")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_a_grandchild_that_leaves_the_group_is_killed_too(tmp_path):
    done, pids = _gate(tmp_path, "children:escapes_the_group")
    assert (done.returncode, done.stderr, len(pids)) == (0, "", 2)
    assert processes.kill_all(pids) == []


def test_the_child_does_not_outlive_a_killed_gate(tmp_path):
    """SIGKILL (a CI job's limit, the OOM killer): ffncli cannot clean up, and the child, in
    a session of its own, is beyond the kill of ffncli's process group."""
    pids = tmp_path / "pids"
    gate = processes.gate("impls.children:stubborn", pids, *IMPL)
    child = processes.wait_for_pids(pids, 1)[0]
    gate.kill()
    gate.wait(60)
    deadline = time.monotonic() + 10
    while processes.alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.kill_all([child]) == []


def test_a_timeout_of_a_billion_seconds_is_no_limit_rather_than_a_crash(tmp_path):
    done, _ = _gate(tmp_path, "children:prints", "--timeout", "1e9", "--load-timeout", "1e300")
    assert (done.returncode, done.stderr) == (0, "")


def test_a_random_function_is_reported_as_random(tmp_path):
    done, _ = _gate(tmp_path, "children:random_output", "--json")
    doc = json.loads(done.stdout)
    assert (done.returncode, [p["name"] for p in doc["properties"]]) == (1, ["deterministic"])
    assert doc["skipped"] == ["permutation_equivariance", "token_independence",
                              "identical_tokens"]


def test_ctrl_c_during_a_call_kills_the_child_and_exits_130(tmp_path):
    pids = tmp_path / "pids"
    gate = processes.gate("impls.children:stubborn", pids, *IMPL, start_new_session=True)
    child = processes.wait_for_pids(pids, 1)[0]
    time.sleep(0.2)  # in its loop, SIGINT and SIGTERM ignored
    gate.send_signal(signal.SIGINT)
    out, err = gate.communicate(timeout=60)
    assert (gate.returncode, out, err) == (130, "", "error: interrupted by SIGINT\n")
    assert processes.kill_all([child]) == [] and processes.left_behind(gate.pid, 1) == []


def test_the_child_imports_from_the_current_directory(tmp_path):
    (tmp_path / "mine.py").write_text("def f(x):\n    return x * 2\n")
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl", "mine:f",
                           *IMPL, "--json"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert all(p["max_abs"] == 0 for p in json.loads(done.stdout)["properties"])


def test_junit_xml_is_never_the_impl_s_source(cli, tmp_path, monkeypatch):
    """Found before the module runs (its file, and its package's __init__.py), so an import
    that fails cannot have its error report written over the module."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    init, mod = tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "broken.py"
    init.write_text("")
    mod.write_text("raise RuntimeError('no')\n")
    for victim in (mod, init):
        r = cli("permute-check", "--impl", "pkg.broken:f", *IMPL, "--junit-xml", victim)
        assert (r.code, r.err) == (2, f"error: option --junit-xml: {victim} is an input of this "
                                      "command (the --impl module's source); choose another "
                                      "path\n")
    assert (mod.read_text(), init.read_text()) == ("raise RuntimeError('no')\n", "")
    r = cli("permute-check", "--impl", "pkg.broken:f", *IMPL, "--junit-xml", "r.xml")
    assert (r.code, r.err) == (2, "error: option --impl: importing 'pkg.broken' raised "
                                  "RuntimeError: no\n")
    assert "raised RuntimeError: no" in (tmp_path / "r.xml").read_text()


def test_bad_input_after_the_report_path_gets_a_junit_error_too(cli, in_tests, tmp_path):
    report = tmp_path / "r.xml"
    r = cli("permute-check", "--impl", "impls.ffns:good", "--d-model", "6", "--random", "20",
            "--trials", "-1", "--junit-xml", report)
    assert r.code == 2
    assert 'type="InputError"' in report.read_text()


# --- the frames ---------------------------------------------------------------------------


def _pipe_with(data: bytes) -> int:
    """A descriptor to read ``data`` from, then its end: a pipe, or a file for more than a
    pipe holds."""
    if len(data) > 4096:
        import tempfile

        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.flush()
            fd = os.dup(f.fileno())
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def test_frames_carry_a_header_and_an_array_exactly():
    r, w = os.pipe()
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    isolate.send(w, {"op": "call", "seq": None}, x)
    header, y = isolate.receive(r, time.monotonic() + 10)
    assert header == {"op": "call", "seq": None}
    assert y.dtype == x.dtype and y.tobytes() == x.tobytes() and not y.flags.writeable
    os.close(w)
    with pytest.raises(isolate.Ended):
        isolate.receive(r)
    os.close(r)


def _frame(header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return len(head).to_bytes(8, "big") + len(payload).to_bytes(8, "big") + head + payload


@pytest.mark.parametrize("data,problem", [
    (_frame({"array": {"dtype": "|O", "shape": [1]}}, b"x" * 8), "an array of dtype object"),
    (_frame({"array": {"dtype": "<f4", "shape": [2, 2]}}, b"x" * 12), "12 bytes for an array"),
    (_frame({"array": {"dtype": "<f4", "shape": [-1]}}), "shape (-1,)"),
    (_frame({}, b"junk"), "bytes with no array"),
    ((2**40).to_bytes(8, "big") + bytes(8), "a header of 1,099,511,627,776 bytes"),
    (_frame({"array": {"dtype": "<f4", "shape": [2**70]}}), "0 bytes for an array"),
    (_frame({"array": {"dtype": "<f4", "shape": [2**40, 2**40]}}), "0 bytes for an array"),
    (len(b"[" * 10**5 + b"]" * 10**5).to_bytes(8, "big") + bytes(8) + b"[" * 10**5
     + b"]" * 10**5, "a header nested too deep"),
])
def test_a_frame_that_lies_is_refused(data, problem):
    fd = _pipe_with(data)
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        isolate.receive(fd, time.monotonic() + 10)
    os.close(fd)


def test_a_truncated_frame_is_the_end_not_a_hang():
    fd = _pipe_with(_frame({"array": {"dtype": "<f8", "shape": [4]}}, bytes(32))[:-5])
    with pytest.raises(isolate.Ended):
        isolate.receive(fd, time.monotonic() + 10)
    os.close(fd)


def test_a_silent_pipe_is_late_at_the_deadline():
    r, w = os.pipe()
    started = time.monotonic()
    with pytest.raises(isolate.Late):
        isolate.receive(r, time.monotonic() + 0.3)
    assert 0.25 < time.monotonic() - started < 10
    os.close(r)
    os.close(w)


def test_a_gate_with_its_stdin_closed_still_talks_to_its_child(tmp_path):
    """``<&-`` (a launcher that closes stdin): the pipe to the child took fd 0, which the
    child's /dev/null stdin replaced; a correct FFN was 'ended its process with exit code 1'."""
    done = subprocess.run([sys.executable, "-m", "ffncli", "permute-check", "--impl",
                           "impls.ffns:good", *IMPL], cwd=TESTS, capture_output=True, text=True,
                          timeout=120, check=False, preexec_fn=lambda: os.close(0))
    assert (done.returncode, done.stderr) == (0, "")


def test_the_user_s_json_py_does_not_replace_ffncli_s(tmp_path):
    """The child started with -m had the project's folder first on sys.path before ffncli's
    own imports: a json.py (or copy.py, typing.py) there broke every check."""
    (tmp_path / "mine.py").write_text("def f(x):\n    return x * 2\n")
    (tmp_path / "json.py").write_text("raise ImportError('the project own json.py')\n")
    console_script = "import sys; del sys.path[0]; from ffncli.cli.main import main; main()"
    done = subprocess.run([sys.executable, "-c", console_script,  # no '' on its sys.path
                           "permute-check", "--impl", "mine:f", *IMPL], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, "")
