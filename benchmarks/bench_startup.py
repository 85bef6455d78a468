"""How long does ffncli take to start, against ``python -c "import numpy"``?

    python benchmarks/bench_startup.py [--reps 21] [--python PATH]

Each command runs in a fresh process from a temporary folder outside the repository, its
bytecode compiled first (as ``pip install`` does; PYTHONDONTWRITEBYTECODE, set on some machines,
would otherwise recompile every run). The commands alternate (A B C ... A B C ...) after one
warm-up round; the medians and ranges of the wall clock are printed with the machine's load
average, and each command's ratio to ``import numpy``. The targets (issue 24): ``params
--preset base`` at most 1.0x, ``params --preset base --json`` and ``ffncli --help`` at most
0.7x. Exits 1 when one is missed and ``--strict`` is given.

Beside them, the floors: the imports of Typer, PyYAML and Rich, and ``startup_floor.py``, the
smallest Typer app that reads the preset and prints a Rich table, JSON or its help. No program
on the fixed stack starts faster than its floor, so a target under the floor cannot be met.

``--python``: the interpreter whose ffncli is measured (default: this one). An editable install
(``pip install -e``) adds its import finder to every start; a plain ``pip install .`` is what
users get.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOR = os.path.join(HERE, "startup_floor.py")  # the stack's own cost: see that file
PRESET = os.path.join(os.path.dirname(HERE), "presets", "base.yaml")
TARGETS = {"params --preset base": 1.0, "params --preset base --json": 0.7, "--help": 0.7}


def commands(python: str) -> dict[str, list[str]]:
    script = os.path.join(os.path.dirname(python), "ffncli")
    ffncli = [script] if os.path.exists(script) else [python, "-m", "ffncli"]
    return {
        "import numpy": [python, "-c", "import numpy"],
        "python -c pass": [python, "-c", "pass"],
        "import typer, yaml, rich.console, rich.table": [
            python, "-c", "import typer, yaml, rich.console, rich.table"],
        "floor: params (startup_floor.py)": [python, FLOOR, "params", "--preset", PRESET],
        "floor: params --json": [python, FLOOR, "params", "--preset", PRESET, "--json"],
        "floor: --help": [python, FLOOR, "--help"],
        "params --preset base": [*ffncli, "params", "--preset", "base"],
        "params --preset base --json": [*ffncli, "params", "--preset", "base", "--json"],
        "--help": [*ffncli, "--help"],
    }


def compile_ffncli(python: str) -> None:
    where = subprocess.run([python, "-c", "import ffncli, os; print(os.path.dirname("
                            "ffncli.__file__))"], capture_output=True, text=True, check=True)
    compileall.compile_dir(where.stdout.strip(), quiet=1)


def timed(argv: list[str], cwd: str) -> float:
    env = {**os.environ, "COLUMNS": "100"}
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--strict", action="store_true", help="exit 1 on a missed target")
    args = parser.parse_args()
    compile_ffncli(args.python)
    cmds = commands(args.python)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{args.reps} alternating runs each, after one warm-up round")
    with tempfile.TemporaryDirectory() as cwd:
        for argv in cmds.values():  # warm-up: the page cache, the bytecode
            timed(argv, cwd)
        for _ in range(args.reps):
            for k, argv in cmds.items():
                times[k].append(timed(argv, cwd))
    base = statistics.median(times["import numpy"])
    missed = []
    for k, ts in times.items():
        med = statistics.median(ts)
        ratios = sorted(t / base for t in ts)
        target = TARGETS.get(k)
        verdict = f"; target at most {target:.1f}" if target is not None else ""
        print(f"{k:<58} {med * 1000:6.1f} ms ({min(ts) * 1000:.1f} to {max(ts) * 1000:.1f}); "
              f"{med / base:.2f}x import numpy (runs {ratios[len(ratios) // 4]:.2f} to "
              f"{ratios[3 * len(ratios) // 4]:.2f}, middle half){verdict}")
        if target is not None and med / base > target:
            missed.append(k)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if missed:
        print("missed: " + ", ".join(missed))
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
