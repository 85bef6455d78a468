"""Split a model folder's model.safetensors into shards and an index, as save_pretrained
does for a large model (model-00001-of-0000N.safetensors + model.safetensors.index.json);
the config.json is copied beside them. Tensors keep their order; each shard gets about the
same number of bytes. Python's standard library only.

    python examples/shard_checkpoint.py "$MINILM" minilm-sharded --shards 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
from pathlib import Path


def read_header(path: Path) -> tuple[dict, int]:
    """The JSON header of a .safetensors file and where its data begins."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a folder holding model.safetensors")
    parser.add_argument("out", type=Path, help="the folder to write (created)")
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    source = args.model / "model.safetensors"
    header, base = read_header(source)
    names = sorted(header, key=lambda name: header[name]["data_offsets"])
    total = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in header.values())
    groups: list[list[str]] = [[] for _ in range(args.shards)]
    done = 0
    for name in names:  # shard i takes the tensors that start in its share of the bytes
        start, end = header[name]["data_offsets"]
        groups[min(done * args.shards // max(total, 1), args.shards - 1)].append(name)
        done += end - start
    args.out.mkdir(parents=True)
    weight_map = {}
    with open(source, "rb") as src:
        for i, group in enumerate(groups):
            file = f"model-{i + 1:05d}-of-{args.shards:05d}.safetensors"
            entries, offset = {}, 0
            for name in group:
                start, end = header[name]["data_offsets"]
                entries[name] = {**header[name], "data_offsets": [offset, offset + end - start]}
                offset += end - start
            raw = json.dumps({"__metadata__": {"format": "pt"}, **entries}).encode()
            raw += b" " * (-len(raw) % 8)  # the data 8-byte aligned, as safetensors writes it
            with open(args.out / file, "wb") as dst:
                dst.write(struct.pack("<Q", len(raw)) + raw)
                for name in group:
                    start, end = header[name]["data_offsets"]
                    src.seek(base + start)
                    dst.write(src.read(end - start))
            weight_map |= dict.fromkeys(group, file)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (args.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    if (args.model / "config.json").is_file():
        shutil.copy(args.model / "config.json", args.out / "config.json")
    print(f"wrote {args.out}: {args.shards} shards, {len(weight_map)} tensors")


if __name__ == "__main__":
    main()
