"""Processes a command leaves behind: run it in a session of its own, and after it exits list
the live processes still in its process group (Dask's workers, the resource tracker). Zombies
do not count: an orphan's exit is reaped by PID 1, which in a container may never do it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ffncli(args: list[str], **popen: object) -> subprocess.Popen[str]:
    """``python -m ffncli ARGS`` from the project's root, in a new session (its own process
    group, so that the group it leaves can be looked for), output captured as text."""
    return python(["-m", "ffncli", *args], **popen)


def python(args: list[str], **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)  # type: ignore[call-overload]


def group(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies aside), from /proc."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        state, process_group = fields[0], int(fields[2])
        if process_group == pgid and state not in ("Z", "X"):
            alive.append(int(entry))
    return alive


def left_behind(pgid: int, wait: float = 10.0) -> list[int]:
    """The processes of group ``pgid`` still alive ``wait`` seconds at most after its leader
    exited (a worker may take a moment to notice). Those found are killed, so that a failing
    test does not leave them either."""
    deadline = time.monotonic() + wait
    while (alive := group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return alive


def alive(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie is not), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X")


def wait_for_pids(path: Path, count: int, wait: float = 120.0) -> list[int]:
    """The first ``count`` pids written to ``path``, one per line (tests/impls/children.py
    records its processes there), waiting ``wait`` seconds at most."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= count:
            return [int(p) for p in lines[:count]]
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {count} pids after {wait:g} s")


def kill_all(pids: list[int]) -> list[int]:
    """Those of ``pids`` still alive (killed, so a failing test leaves none behind)."""
    found = [pid for pid in pids if alive(pid)]
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


def gate(impl: str, pids: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    """``python -m ffncli permute-check --impl IMPL ARGS`` in tests/, as CI runs it, output
    captured; tests/impls/children.py records its processes' pids in ``pids``."""
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-m", "ffncli", "permute-check", "--impl", impl, *args],
        cwd=ROOT / "tests", text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "FFNCLI_TEST_PIDFILE": str(pids)}, **popen)
