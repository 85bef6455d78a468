"""Counting a sharded checkpoint against counting the same tensors in one file.

`ffncli params --weights` reads headers only. This script writes the headers of Llama-2-7B
and of a Mixtral-8x7B-shaped model twice, as one .safetensors file and as 8 shards with their
model.safetensors.index.json (the files are sparse: the data is never written), and times
``count_file(read_checkpoint(path))`` on each in one process, interleaved, median of --reps.
It prints the sharded/single ratio (1.0 = as fast), and exits 1 over --max-ratio.

    python benchmarks/bench_shards.py [--reps 51] [--max-ratio 1.5]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ffncli.counting.files import count_file
from ffncli.formats.safetensors import INDEX_NAME, read_checkpoint


def llama_like(layers: int, d: int, f: int, vocab: int, kv: int,
               experts: int = 0) -> dict[str, list[int]]:
    """Tensor name -> shape, as a Llama (or, with experts, Mixtral) checkpoint names them."""
    shapes = {"model.embed_tokens.weight": [vocab, d]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": [d, d], p + "self_attn.k_proj.weight": [kv, d],
                   p + "self_attn.v_proj.weight": [kv, d], p + "self_attn.o_proj.weight": [d, d],
                   p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d]}
        if experts:
            shapes[p + "block_sparse_moe.gate.weight"] = [experts, d]
            for e in range(experts):
                q = f"{p}block_sparse_moe.experts.{e}."
                shapes |= {q + "w1.weight": [f, d], q + "w3.weight": [f, d],
                           q + "w2.weight": [d, f]}
        else:
            shapes |= {p + "mlp.gate_proj.weight": [f, d], p + "mlp.up_proj.weight": [f, d],
                       p + "mlp.down_proj.weight": [d, f]}
    shapes |= {"model.norm.weight": [d], "lm_head.weight": [vocab, d]}
    return shapes


def write_sparse(path: Path, shapes: dict[str, list[int]]) -> None:
    """A .safetensors file of these BF16 tensors: the header, then a hole as long as the data."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


def write_both(folder: Path, shapes: dict[str, list[int]], shards: int = 8) -> tuple[Path, Path]:
    single = folder / "single" / "model.safetensors"
    single.parent.mkdir()
    write_sparse(single, shapes)
    sharded = folder / "sharded"
    sharded.mkdir()
    names = list(shapes)
    per = -(-len(names) // shards)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s * per:(s + 1) * per]
        write_sparse(sharded / file, {n: shapes[n] for n in part})
        weight_map |= dict.fromkeys(part, file)
    (sharded / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return single, sharded


def timed(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    total = count_file(read_checkpoint(path)).total
    return time.perf_counter() - start, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=51)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    args = parser.parse_args()
    models = {
        "llama2-7b (291 tensors)": llama_like(32, 4096, 11008, 32000, 4096),
        "mixtral-8x7b (995 tensors)": llama_like(32, 4096, 14336, 32000, 1024, experts=8),
    }
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, shapes) in enumerate(models.items()):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            single, sharded = write_both(folder, shapes)
            times: dict[str, list[float]] = {"single": [], "sharded": []}
            for _ in range(args.reps):  # interleaved, so both see the same machine
                for kind, path in (("single", single), ("sharded", sharded)):
                    seconds, total = timed(path)
                    times[kind].append(seconds)
                    assert total == sum(_numel(s) for s in shapes.values())
            a, b = median(times["single"]), median(times["sharded"])
            worst = max(worst, b / a)
            print(f"{label}: one file {a * 1e3:.2f} ms, 8 shards + index {b * 1e3:.2f} ms, "
                  f"ratio {b / a:.2f}")
    return 1 if worst > args.max_ratio else 0


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    sys.exit(main())
