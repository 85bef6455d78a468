"""Tokens per second of the whole-model forward on the MoE fixtures, ffncli against
transformers with PyTorch on CPU, both on one BLAS thread (issue 42's closing note: each
family's fixture).

    PYTHONPATH=. /work/zoo-venv/bin/python benchmarks/bench_moe_forward.py [CASE ...] \\
        [--sequences 16] [--reps 15] [--threads 1]

Run it with a Python that has torch and transformers besides NumPy (ffncli from the checkout,
on PYTHONPATH; its CLI dependencies need not be installed). The thread count is set in the
environment (OMP/OpenBLAS/MKL) before NumPy and torch load, and ``torch.set_num_threads``.
For each case of tests/data/forward (default: every MoE family: Qwen2-MoE, Qwen3-MoE, OLMoE,
DeepSeek-V2, DeepSeek-V3, GLM-4.5, gpt-oss, Llama 4 text, Mixtral), ``--sequences`` random
sequences of the model's 64 positions each, the same token ids for both:

- ffncli: ``forward.walk.hidden_states`` to the final states (every layer, packed batches,
  float32);
- transformers: the base model's forward on the same sequences as one batch (no padding:
  all are as long), float32, eager attention (as the fixtures were made), its default experts
  implementation, ``torch.inference_mode``; the final states checked against ffncli's
  (max |difference|).

One warm-up each, then ``--reps`` repetitions interleaved (ffncli, torch, ffncli, ...): the
median tokens/s of each, the spread (min-max over the runs), the median of the per-pair
ratios (each ffncli run against the torch run next to it: the pair shares the load), and the
load average before and after.
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":  # the BLAS threads are fixed when NumPy and torch load
    _threads = "1"
    for _i, _a in enumerate(sys.argv):
        if _a == "--threads" and _i + 1 < len(sys.argv):
            _threads = sys.argv[_i + 1]
        elif _a.startswith("--threads="):
            _threads = _a.split("=", 1)[1]
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = _threads

import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from ffncli.compute.forward.families import open_transformer  # noqa: E402
from ffncli.compute.forward.walk import hidden_states  # noqa: E402
from ffncli.jobs.resolve import resolve_spec  # noqa: E402

FORWARD = Path(__file__).resolve().parents[1] / "tests" / "data" / "forward"
CASES = ("qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe",
         "gpt_oss", "llama4_text", "mixtral")


def bench(case: str, sequences: int, reps: int) -> str:
    weights = FORWARD / case / "model.safetensors"
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    ids = np.random.default_rng(0).integers(0, 128, (sequences, spec.seq_len or 64))
    tokens = ids.size
    ours = open_transformer(spec, weights, np.dtype(np.float32))
    theirs = AutoModelForCausalLM.from_pretrained(FORWARD / case, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    # the decoder: base_model is the whole model for Llama 4's text model (no prefix match)
    body = getattr(theirs, "model", theirs.base_model)
    batch = torch.from_numpy(ids)

    def run_ours() -> np.ndarray:
        return hidden_states(ours, list(ids), [])[1]

    def run_theirs() -> np.ndarray:
        with torch.inference_mode():
            out = body(input_ids=batch, attention_mask=torch.ones_like(batch))
        return out.last_hidden_state.reshape(tokens, -1).numpy()

    diff = float(np.abs(run_ours() - run_theirs()).max())
    times: dict[str, list[float]] = {"ffncli": [], "torch": []}
    for _ in range(reps):
        for name, fn in (("ffncli", run_ours), ("torch", run_theirs)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ours.close()
    rate = {k: [tokens / t for t in v] for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in rate.items()}
    ratio = statistics.median(t / o for o, t in zip(times["ffncli"], times["torch"], strict=True))
    return (f"| {case} | {tokens:,} | {med['ffncli']:,.0f} ({min(rate['ffncli']):,.0f}-"
            f"{max(rate['ffncli']):,.0f}) | {med['torch']:,.0f} ({min(rate['torch']):,.0f}-"
            f"{max(rate['torch']):,.0f}) | {ratio:.2f}x | {diff:.1e} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("cases", nargs="*", default=list(CASES))
    p.add_argument("--sequences", type=int, default=16)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"numpy {np.__version__}, torch {torch.__version__}, {args.threads} thread(s) of "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print("| case | tokens | ffncli tok/s median (min-max) | transformers tok/s median "
          "(min-max) | ffncli/transformers (median of pairs) | max abs final diff |")
    print("|---|--:|--:|--:|--:|--:|")
    for case in args.cases:
        print(bench(case, args.sequences, args.reps), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
