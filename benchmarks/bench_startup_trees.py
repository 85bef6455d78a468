"""One ffncli command's start-up in two or more source trees (each with its own ``.venv``),
alternating so that the machine's drift falls on every tree alike.

    python benchmarks/bench_startup_trees.py --tree /tmp/base --tree . [--rounds 5 --runs 6] \\
        [--instructions] -- params --preset base --json

Each tree's bytecode is compiled first (``PYTHONDONTWRITEBYTECODE``, set on some machines, is
taken out of the children's environment), then one warm-up run each; then ``--rounds`` rounds,
in each ``--runs`` runs of every tree in turn. Printed per tree: the median wall clock and the
range of the rounds' medians (the run-to-run spread), and the same for the CPU time (user +
system) of the child. ``--instructions``: also the instructions one run executes, counted by
``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0`` (about 50 times slower, and the same
from run to run whatever the machine's load: the figure to compare on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "COLUMNS": "100"}


def _argv(tree: str, args: list[str]) -> list[str]:
    return [os.path.join(tree, ".venv", "bin", "ffncli"), *args]


def _timed(argv: list[str], cwd: str) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=_env(), cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall * 1000, cpu * 1000


def _instructions(tree: str, args: list[str], cwd: str) -> int:
    python = os.path.join(tree, ".venv", "bin", "python")
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           python, *_argv(tree, args)], env={**_env(), "PYTHONHASHSEED": "0"},
                          cwd=cwd, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr}")
    return int(found.group(1))


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", required=True,
                        help="a source tree with its own .venv (give two or more)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("args", nargs="+", help="the ffncli command, after --")
    a = parser.parse_args()
    cwd = tempfile.mkdtemp()
    for tree in a.tree:
        subprocess.run([os.path.join(tree, ".venv", "bin", "python"), "-m", "compileall", "-q",
                        os.path.join(tree, "ffncli")], env=_env(), check=True)
        _timed(_argv(tree, a.args), cwd)  # warm-up
    walls: dict[str, list[float]] = {t: [] for t in a.tree}
    cpus: dict[str, list[float]] = {t: [] for t in a.tree}
    rounds: dict[str, list[tuple[float, float]]] = {t: [] for t in a.tree}
    for _ in range(a.rounds):
        for tree in a.tree:
            runs = [_timed(_argv(tree, a.args), cwd) for _ in range(a.runs)]
            walls[tree] += [w for w, _ in runs]
            cpus[tree] += [c for _, c in runs]
            rounds[tree].append((statistics.median(w for w, _ in runs),
                                 statistics.median(c for _, c in runs)))
    print(f"ffncli {' '.join(a.args)}: {a.rounds} rounds x {a.runs} runs, load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for tree in a.tree:
        line = (f"{tree}: wall {statistics.median(walls[tree]):.1f} ms "
                f"[{_spread([w for w, _ in rounds[tree]])}], CPU "
                f"{statistics.median(cpus[tree]):.1f} ms [{_spread([c for _, c in rounds[tree]])}]")
        if a.instructions:
            line += f", {_instructions(tree, a.args, cwd) / 1e6:.1f}M instructions"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
