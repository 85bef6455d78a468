"""Header-only checkpoints of the zoo's model types, made from the names and shapes of the
classes transformers builds (tests/data/checkpoints/names.json, tests/fixtures/
make_checkpoint_names.py): a safetensors header, its data a hole in a sparse file (a
DeepSeek-V3 of 1.3 TB takes a few kilobytes on disk)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from conftest import DATA

NAMES = json.loads((DATA / "checkpoints" / "names.json").read_text())["types"]
ZOO = json.loads((DATA / "zoo" / "truths.json").read_text())["types"]


def shapes(model_type: str) -> dict[str, tuple[int, ...]]:
    """Every parameter of the type's built class: full name -> shape."""
    out: dict[str, tuple[int, ...]] = {}
    for stack, name, shape, layers in NAMES[model_type]:
        for i in layers if layers is not None else [None]:
            out[name if i is None else f"{stack}.{i}.{name}"] = tuple(shape)
    return out


STACKS = ("layers", "h", "blocks")  # the decoder's stack: model.layers, GPT-2's h, MPT's blocks


def layer_of(name: str) -> int | None:
    """The decoder layer a full name is in (``model.layers.3.mlp...``, ``transformer.h.3...``
    -> 3), else None."""
    parts = name.split(".")
    for a, b in zip(parts, parts[1:], strict=False):
        if a in STACKS and b.isdigit():
            return int(b)
    return None


def write_safetensors(path: Path, tensors: dict[str, tuple[int, ...]], dtype: str = "BF16",
                      itemsize: int = 2) -> Path:
    """A safetensors file of ``tensors`` (name -> shape) whose data is never written."""
    header: dict[str, object] = {}
    at = 0
    for name, shape in tensors.items():
        n = math.prod(shape) * itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + at)
    return path


def truth(model_type: str) -> dict:
    return ZOO[model_type]["builds"]["causal_lm"]


def decoder_stack(model_type: str) -> dict:
    """The truth's decoder stack (its per-layer params and FFN)."""
    return next(s for p, s in truth(model_type)["stacks"].items()
                if p.rsplit(".", 1)[-1] in STACKS)


def ffn_parts(count) -> dict[str, int]:
    """The FFN parts of ffncli's count (a ModelCount), from its layers' rows: the routed experts
    (all of them), the router, the shared experts and their gate (only those it has)."""
    from ffncli.counting.files import FFN_PARTS

    parts = dict.fromkeys(FFN_PARTS, 0)
    for layer in count.layers:
        for row in layer.ffn_rows:
            part = ("experts" if row.name.startswith("x ") and row.name.endswith(" experts")
                    else "router" if row.name == "router"
                    else "shared experts" if row.name.startswith("shared expert") else None)
            if part is not None:
                parts[part] += layer.count * row.params
    return {p: n for p, n in parts.items() if n}
