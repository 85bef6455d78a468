"""Tokens per second of the whole-model forward on the tiny MoE fixtures, ffncli against
transformers with PyTorch on CPU (issue 42's closing note: each family's fixture).

    PYTHONPATH=. python benchmarks/bench_moe_forward.py [CASE ...] [--sequences 16] [--reps 15]

Run it with a Python that has torch and transformers besides ffncli's dependencies (numpy,
threadpoolctl, typer, rich, pyyaml; ffncli itself from the checkout, on PYTHONPATH). For each
case of tests/data/forward (default: DeepSeek-V2, DeepSeek-V3, GLM-4.5), ``--sequences``
random sequences of the model's 64 positions each:

- ffncli: ``forward.walk.hidden_states`` to the final states (every layer, packed batches,
  float32, NumPy's BLAS on every core);
- transformers: the base model's forward on the same sequences as one batch (no padding:
  all are as long), float32, its default attention and experts implementations,
  ``torch.inference_mode``, ``torch.set_num_threads(os.cpu_count())``; the final states
  checked against ffncli's (max |difference|).

One warm-up each, then ``--reps`` repetitions interleaved (ffncli, torch, ffncli, ...); the
median and the best tokens/s of each and their ratios, with the load average. On a shared
machine the median follows the other processes' load; the best run is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import hidden_states
from ffncli.jobs.resolve import resolve_spec

FORWARD = Path(__file__).resolve().parents[1] / "tests" / "data" / "forward"
CASES = ("deepseek_v2", "deepseek_v3", "glm4_moe")


def bench(case: str, sequences: int, reps: int) -> str:
    weights = FORWARD / case / "model.safetensors"
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    ids = np.random.default_rng(0).integers(0, 128, (sequences, spec.seq_len or 64))
    tokens = ids.size
    ours = open_transformer(spec, weights, np.dtype(np.float32))
    theirs = AutoModelForCausalLM.from_pretrained(FORWARD / case, dtype=torch.float32).eval()
    batch = torch.from_numpy(ids)

    def run_ours() -> np.ndarray:
        return hidden_states(ours, list(ids), [])[1]

    def run_theirs() -> np.ndarray:
        with torch.inference_mode():
            out = theirs.base_model(input_ids=batch, attention_mask=torch.ones_like(batch))
        return out.last_hidden_state.reshape(tokens, -1).numpy()

    diff = float(np.abs(run_ours() - run_theirs()).max())
    times: dict[str, list[float]] = {"ffncli": [], "torch": []}
    for _ in range(reps):
        for name, fn in (("ffncli", run_ours), ("torch", run_theirs)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ours.close()
    med = {k: tokens / statistics.median(v) for k, v in times.items()}
    best = {k: tokens / min(v) for k, v in times.items()}
    return (f"{case:12} {tokens:6,} tokens  median: ffncli {med['ffncli']:7,.0f} tok/s, torch "
            f"{med['torch']:7,.0f} ({med['ffncli'] / med['torch']:.2f}x)  best: ffncli "
            f"{best['ffncli']:7,.0f}, torch {best['torch']:7,.0f} "
            f"({best['ffncli'] / best['torch']:.2f}x)  (max |final diff| {diff:.1e})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=list(CASES))
    p.add_argument("--sequences", type=int, default=16)
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
    for case in args.cases:
        print(bench(case, args.sequences, args.reps))
    print(f"load average after: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
