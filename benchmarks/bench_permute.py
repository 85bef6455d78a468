"""What does the child process cost ``permute-check --impl``?

    python benchmarks/bench_permute.py [--reps N] [--tokens 256,4096,20000] [--d-model 256]

One process, interleaved repetitions after a warm-up: the same NumPy FFN (tests/impls/
children.py's ``prints`` without its prints: tests/impls/ffns.py's weights at --d-model) checked
(1) in this process, ``ffncli.permute_check``, and (2) as the command does it, in a child
process (``jobs.permute.open_target`` + ``check_command``: every call's tokens and outputs
through the pipes, the child started and its module imported once per check). Medians and
ranges of seconds per check, and the ratio child / in-process; the same verdict both ways.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MODULE = '''
import numpy as np

_rng = np.random.default_rng(5)
W1 = _rng.normal(0, 0.1, ({d}, {f})).astype(np.float32)
B1 = np.zeros({f}, np.float32)
W2 = _rng.normal(0, 0.1, ({f}, {d})).astype(np.float32)
B2 = np.zeros({d}, np.float32)


def ffn(x):
    return np.maximum(0, x @ W1 + B1) @ W2 + B2
'''


def _compare(n: int, d: int, reps: int, folder: Path, ffn: object) -> dict[str, list[float]]:
    """Seconds per check of ``n`` tokens, in this process and in a child, interleaved."""
    import ffncli
    from ffncli.jobs.choices import ModelChoice, TokenChoice
    from ffncli.jobs.permute import check_command, open_target
    from ffncli.specs.spec import Overrides

    x = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    np.save(folder / "x.npy", x)
    choice, tokens = ModelChoice(None, None, None, None), TokenChoice(input=folder / "x.npy")

    def here() -> bool:
        return ffncli.permute_check(ffn, x).passed

    def child() -> bool:
        with open_target("bench_ffn_module:ffn", choice, Overrides(d_model=d), None) as t:
            return check_command(t, tokens).passed

    times: dict[str, list[float]] = {"here": [], "child": []}
    verdicts = {here(), child()}  # warm-up, and the same verdict both ways
    for _ in range(reps):
        for name, fn in (("here", here), ("child", child)):
            started = time.perf_counter()
            verdicts.add(fn())
            times[name].append(time.perf_counter() - started)
    assert verdicts == {True}, verdicts
    return times


def _span(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.3f} ({min(seconds):.3f}-{max(seconds):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", default="256,4096,20000")
    ap.add_argument("--d-model", type=int, default=256)
    args = ap.parse_args()
    d, f = args.d_model, 4 * args.d_model

    folder = Path(tempfile.mkdtemp())
    (folder / "bench_ffn_module.py").write_text(MODULE.format(d=d, f=f))
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    import bench_ffn_module  # type: ignore[import-not-found]

    print(f"d_model {d}, d_ff {f}, float32, {args.reps} repetitions, {os.cpu_count()} cores")
    print(f"{'tokens':>8} {'in-process s':>22} {'child s':>22} {'child/in-process':>17}")
    for n in (int(t) for t in args.tokens.split(",")):
        times = _compare(n, d, args.reps, folder, bench_ffn_module.ffn)
        h, c = (statistics.median(times[k]) for k in ("here", "child"))
        print(f"{n:>8,} {_span(times['here']):>22} {_span(times['child']):>22} {c / h:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
