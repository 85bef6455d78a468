"""The machine's load for the benchmarks: ``--load busy`` starts one spinning process per spare
core (all cores but one) for the timed part, and each figure says which it had.

    from load import LOADS, machine_load
    with machine_load("busy") as said:
        print(said)  # "busy: 1 spinning process (one per spare core), load average 1.02"
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

LOADS = ("quiet", "busy")
SPIN = "while True: pass"


def spare_cores() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


@contextlib.contextmanager
def machine_load(load: str) -> Iterator[str]:
    """Run the block with no load of our own ("quiet") or one spinning process per spare core
    ("busy", ended after the block); yields a line that says which, with the load average."""
    if load not in LOADS:
        raise ValueError(f"load: expected one of {LOADS}, got {load!r}")
    spinning = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in
                range(spare_cores() if load == "busy" else 0)]
    try:
        if spinning:
            said = (f"busy: {len(spinning)} spinning process{'es' if len(spinning) > 1 else ''}"
                    f" started (one per spare core of {os.cpu_count()})")
        else:
            said = "quiet: no load started by the benchmark"
        yield f"{said}; load average before {os.getloadavg()[0]:.2f}"
    finally:
        for p in spinning:
            p.kill()
            p.wait()


def loads_of(choice: str) -> tuple[str, ...]:
    """--load quiet|busy|both -> the loads to run, in order."""
    return LOADS if choice == "both" else (choice,)
