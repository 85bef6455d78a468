"""Peak memory of the MoE forward on a larger random checkpoint against issue 42's budget: one
layer's weights (all its experts) + one batch + 200 MB, over the interpreter's baseline.

    /work/zoo-venv/bin/python benchmarks/bench_moe_memory.py [--tokens 20000] \\
        [--python .venv/bin/python] [--command perplexity] [--keep]

The parent runs in a venv with torch and transformers (it builds the checkpoint); the child,
``ffncli`` itself, runs with ``--python`` (default: the checkout's .venv, where ffncli is
installed), so no torch is loaded where the memory is measured. Steps:

1. (in a subprocess) a random Qwen3-MoE (hidden 1024, 4 layers, every one sparse: 64
   experts of 512, top-8; 16 heads of 64, 4 KV heads; vocab 1024), float32, saved with
   ``save_pretrained`` (safetensors, the experts fused in 3-D as transformers 5 writes them)
   to a temporary folder (about 1.6 GB; deleted after unless ``--keep``);
2. ``--tokens`` random ids (a 2-D int64 .npy, sequences of ``--ctx``) in the same folder;
3. ``python -m ffncli --version`` and ``python -m ffncli <command> --weights DIR --ids FILE``
   in subprocesses, each one's peak RSS from ``os.wait4`` (the kernel's ru_maxrss);
4. the budget from the checkpoint's own tensors and ``compute.forward.walk.BATCH_TOKENS``:
   one layer = layer 0's tensors (attention, router, all experts, norms) in float32; one batch
   = ten (BATCH_TOKENS, d_model) float32 arrays (the spill buffer, the states, norm1's output
   and its scratch, q, k, v, the attention's context and output, the FFN's input and output),
   one expert's engine buffers at its most (every token of the batch routed to it:
   ``compute.memory.engine_bytes``), one sequence's attention scores (heads x ctx x ctx) and
   the batch's logits (BATCH_TOKENS x vocab, perplexity's head); verdict: peak - baseline
   against layer + batch + 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 2**20

CONFIG = dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
              num_key_value_heads=4, head_dim=64, intermediate_size=2048,
              moe_intermediate_size=512, num_experts=64, num_experts_per_tok=8,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
              vocab_size=1024, max_position_embeddings=4096, tie_word_embeddings=False)


BUILD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig
torch.manual_seed(0)
config = Qwen3MoeConfig(**json.loads(sys.argv[1]))
AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(sys.argv[2])
"""


def build(folder: Path) -> None:
    """In a subprocess of its own: a forked child's ru_maxrss starts at its parent's RSS (the
    pages it shares until exec), so the parent must not hold the model."""
    subprocess.run([sys.executable, "-c", BUILD, json.dumps(CONFIG), str(folder)], check=True)


def tensors(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """name -> (dtype, shape) from the safetensors headers."""
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        out.update({k: (v["dtype"], v["shape"]) for k, v in header.items()
                    if k != "__metadata__"})
    return out


def peak_of(argv: list[str]) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, stdout) of a subprocess."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(f"the run failed ({status}): {argv}")
    return usage.ru_maxrss * 1024 / MB, time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tokens", type=int, default=20_000)
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--command", default="perplexity", choices=("perplexity", "capture"))
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    import numpy as np

    folder = Path(tempfile.mkdtemp(prefix="ffncli-moe-memory-"))
    try:
        t = time.perf_counter()
        build(folder)
        size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        layer_mb = sum(int(np.prod(shape)) * 4 for name, (_, shape) in tensors(folder).items()
                       if ".layers.0." in name) / MB
        print(f"checkpoint: {folder} ({size / MB:,.0f} MB, {time.perf_counter() - t:.0f} s)")
        ids = folder / "ids.npy"
        rng = np.random.default_rng(0)
        np.save(ids, rng.integers(0, CONFIG["vocab_size"],
                                     (args.tokens // args.ctx, args.ctx), dtype=np.int64))

        base, _, version = peak_of([args.python, "-m", "ffncli", "--version"])
        run = [args.python, "-m", "ffncli", args.command, "--weights", str(folder),
               "--ids", str(ids)]
        if args.command == "perplexity":
            run += ["--ctx", str(args.ctx), "--quiet"]
        else:
            run += ["--layer", "all", "--out", str(folder / "capture"), "--quiet"]
        peak, seconds, out = peak_of(run)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    from ffncli.compute.forward.walk import BATCH_TOKENS
    from ffncli.compute.memory import engine_bytes

    f32 = np.dtype(np.float32)
    c = CONFIG
    d, n = c["hidden_size"], BATCH_TOKENS
    heads = c["num_attention_heads"]
    batch_mb = (10 * n * d * 4
                + engine_bytes(d, c["moe_intermediate_size"], c["num_experts"], f32, n)
                + heads * args.ctx * args.ctx * 4
                + n * c["vocab_size"] * 4) / MB
    budget = layer_mb + batch_mb + 200
    print(f"ffncli {version.strip()}; {args.command} on {args.tokens:,} random ids: "
          f"{seconds:.0f} s ({args.tokens / seconds:,.0f} tok/s); "
          f"{out.strip().splitlines()[-1] if out.strip() else ''}")
    print(f"peak RSS {peak:,.0f} MB; baseline (ffncli --version) {base:,.0f} MB; "
          f"above baseline {peak - base:,.0f} MB")
    print(f"budget: one layer {layer_mb:,.0f} MB + one batch {batch_mb:,.0f} MB + 200 MB = "
          f"{budget:,.0f} MB above baseline: {'within' if peak - base <= budget else 'OVER'} "
          f"({(peak - base) / budget:.0%} of it); the whole checkpoint {size / MB:,.0f} MB")


if __name__ == "__main__":
    main()
