"""Where the shards run (jobs/shards/pool.py): Dask keeps its log lines to itself unless
--verbose asks for them, and more --workers than cores gets one line saying so."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")


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
