"""Where the shards run (jobs/shards/pool.py): Dask keeps its log lines to itself unless
--verbose asks for them, more --workers than cores gets one line saying so, a --scheduler that
is not one (or has no workers) is one line within the bound, and a signal while the local
cluster starts is not lost."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from helpers import processes

distributed = pytest.importorskip("distributed")

from ffncli.jobs.shards import pool as pools  # noqa: E402

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

LEVELS = """
import logging
import warnings
warnings.simplefilter("ignore")  # as the CLI does (a port in use is a warning, not a log)
from ffncli.jobs.choices import ScaleChoice
from ffncli.jobs.shards.pool import connect

def level():
    handlers = [h for h in logging.getLogger("distributed").handlers
                if isinstance(h, logging.StreamHandler)]
    return min(h.level for h in handlers) if handlers else None

with connect(ScaleChoice(workers=1, verbose=VERBOSE)) as pool:
    print(level(), *pool.client.run(level).values())
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_dask_logs_are_silenced_in_this_process_and_the_workers(verbose):
    """An ERROR of a worker (its heartbeat failing as the cluster shuts down) was a 30-line
    traceback on the user's stderr. Dask logs through its own stream handlers, here and in
    each worker: without --verbose they let nothing through (above CRITICAL); with it,
    warnings and errors."""
    p = subprocess.run([sys.executable, "-c", LEVELS.replace("VERBOSE", str(verbose))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    levels = [int(level) for level in p.stdout.split()]
    assert len(levels) == 2
    for level in levels:
        assert level > logging.CRITICAL if not verbose else level <= logging.WARNING
    assert verbose or p.stderr == ""


def test_more_workers_than_cores_is_one_note(tmp_path):
    acts = tmp_path / "acts"
    acts.mkdir()
    for i in range(2):
        np.save(acts / f"p{i}.npy", np.ones((3, 4), np.float32))
    cores = len(os.sched_getaffinity(0))
    p = subprocess.run([sys.executable, "-m", "ffncli", "relu-stats", "--preset", "tiny",
                        "--input", str(acts), "--workers", str(cores + 1), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0
    assert p.stderr == (f"note: --workers {cores + 1} on {cores} core{'s' * (cores != 1)}: at "
                        f"most {cores} run at a time\n")
    assert '"tokens": 6' in p.stdout


# ---------------------------------------------------------------------------------------------
# --scheduler at peers that are not a Dask scheduler: one line, within the bound.

BOUND = 1.0  # CONNECT_TIMEOUT in these tests, seconds


def _silent(conn: socket.socket) -> None:
    """Accepts, then says nothing."""


def _http(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")


def _huge_frame(conn: socket.socket) -> None:
    """Dask's first 8 bytes are a frame count: this one claims 2**61 frames."""
    conn.sendall(struct.pack("<Q", 2**61) + b"\xff" * 64)


def _short_frames(conn: socket.socket) -> None:
    """One frame of 5 bytes, announced, then cut: a struct that does not unpack."""
    conn.sendall(struct.pack("<Q", 1) + struct.pack("<Q", 5) + b"\x93\x01")
    conn.shutdown(socket.SHUT_WR)


def _closes(conn: socket.socket) -> None:
    conn.close()


@contextlib.contextmanager
def peer(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A real TCP server on localhost answering every connection with ``answer``."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            with contextlib.suppress(OSError):
                answer(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def returns(fn: Callable[[], object], within: float = 30) -> object:
    """``fn()``, failing the test (not hanging it) if it has not returned ``within``."""
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    thread.start()
    thread.join(within)
    assert done, f"still connecting after {within} s"
    return done[0]


PROTOCOL = "it does not speak Dask's protocol (not a Dask scheduler?)"


@pytest.mark.parametrize("answer, reason", [
    (_silent, f"no answer within {BOUND:g} s"),
    (_http, PROTOCOL),
    (_huge_frame, PROTOCOL),
    (_short_frames, PROTOCOL),
    (_closes, "it closed the connection during Dask's handshake"),
], ids=["silent", "http", "huge-frame", "short-frames", "closes"])
def test_a_scheduler_that_is_not_dask_is_one_line(cli, tmp_path, monkeypatch, answer, reason):
    """A silent peer hung for ever (Dask bounds the TCP connection, not its handshake); an
    HTTP server or garbage made Dask allocate exabytes or fail to unpack, with a traceback."""
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    monkeypatch.setattr(pools, "CONNECT_TIMEOUT", BOUND)
    with peer(answer) as address:
        r = returns(lambda: cli("relu-stats", "--preset", "toy", "--input", tmp_path / "a.npy",
                                "--scheduler", address))
    assert (r.code, r.out, r.err) == (2, "", f"error: cannot reach the Dask scheduler at "
                                             f"{address}: {reason}\n")


def test_a_scheduler_without_workers_says_so(cli, tmp_path, monkeypatch):
    """A real scheduler with no worker: the job waited in silence for ever."""
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    monkeypatch.setattr(pools, "CONNECT_TIMEOUT", BOUND)
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp",
                                  dashboard_address=None) as empty:
        address = empty.scheduler_address
        r = returns(lambda: cli("relu-stats", "--preset", "toy", "--input", tmp_path / "a.npy",
                                "--scheduler", address))
    assert (r.code, r.out, r.err) == (2, "", f"error: the Dask scheduler at {address} has no "
                                             f"workers: none joined within {BOUND:g} s\n")


def test_a_worker_is_not_a_scheduler(cli, tmp_path, monkeypatch):
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    monkeypatch.setattr(pools, "CONNECT_TIMEOUT", BOUND)
    with distributed.LocalCluster(n_workers=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as local:
        address = next(iter(local.scheduler_info["workers"]))
        r = returns(lambda: cli("relu-stats", "--preset", "toy", "--input", tmp_path / "a.npy",
                                "--scheduler", address))
    assert (r.code, r.out, r.err) == (2, "", f"error: cannot reach the Dask scheduler at "
                                             f"{address}: it is a Dask Worker, not a "
                                             "scheduler\n")


# ---------------------------------------------------------------------------------------------
# Signals while the local cluster starts.

SIGNAL_AT_START = """
import os, signal, sys, threading
from multiprocessing import process
from ffncli.cli.main import main

spawn = process.BaseProcess.start

def spawned(self):  # as each worker process starts
    spawn(self)
    if signal.SIGNUM == signal.SIGTERM:
        os.kill(os.getpid(), signal.SIGNUM)
    else:  # Ctrl-C and hangups reach the whole process group, the workers too: a moment
        # later, when the worker has Python's handlers (it is importing Dask)
        threading.Timer(0.3, os.killpg, (os.getpgrp(), signal.SIGNUM)).start()

process.BaseProcess.start = spawned
sys.argv = ["ffncli", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_the_workers_start_stops_the_job(tmp_path, signum):
    """Ctrl-C in the first seconds of --workers was ignored (SIGINT was, while the workers
    started) and the job ran to the end with exit 0. Now it waits until the cluster is up, then
    stops the job like any signal: exit 128 + n, one line, no worker left, none of them saying
    anything (they never see the terminal's SIGINT or SIGHUP)."""
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    code = SIGNAL_AT_START.replace("SIGNUM", signal.Signals(signum).name)
    job = processes.python(["-c", code, "relu-stats", "--preset", "tiny", "--input",
                            str(tmp_path / "a.npy"), "--workers", "2", "--json"])
    out, err = job.communicate(timeout=120)
    assert (job.returncode, out, err) == (
        128 + signum, "", f"error: interrupted by {signal.Signals(signum).name}\n")
    assert processes.left_behind(job.pid) == []
