"""``capture``: real text through the whole model, every selected layer's FFN input written to
``DIR/layer{N}.npy`` (each file atomically) and ``DIR/capture.json``.

It is one walk (:func:`ffncli.compute.forward.walk.walk`) over the sequences, as the sweep of
``relu-stats --text`` is with another visitor: layer by layer (one layer's weights in memory),
batch by batch, each selected layer's FFN input handed over in text order.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.base.files import output_folder, write_text_atomically
from ffncli.errors import OutputError
from ffncli.formats.npy import AtomicNpyWriter
from ffncli.jobs.progress import Callback

if TYPE_CHECKING:
    from ffncli.compute.forward.families import Transformer
    from ffncli.compute.forward.layer import Block
    from ffncli.formats.text import Sequences




# ---------------------------------------------------------------------------------------------
# capture: DIR/layer{N}.npy and DIR/capture.json


@dataclass(frozen=True)
class CaptureResult:
    out: str
    model: str
    layers: tuple[int, ...]
    tokens: int
    sequences: int
    d_model: int
    files: tuple[str, ...]


def layer_file(out: Path, layer: int) -> Path:
    return out / f"layer{layer}.npy"


def capture(model: Transformer, sequences: Sequences, layers: Sequence[int], out: Path, *,
            force: bool = False, inputs: Sequence[Path | None] = (),
            batch_tokens: int | None = None,
            progress: Callback | None = None) -> CaptureResult:
    """Write each selected layer's FFN input, float32 (tokens, d_model) in text order, to
    ``out/layer{N}.npy`` (each file atomically), then ``out/capture.json``."""
    created = output_folder(out, writer="capture", force=force, inputs=inputs)
    try:
        _capture_layers(model, sequences, layers, out, inputs, batch_tokens, progress)
    except BaseException:
        if created:  # a folder this run made and left empty (nothing completed) goes too
            with contextlib.suppress(OSError):
                os.rmdir(out)
        raise
    files = tuple(layer_file(out, i) for i in layers)
    manifest = capture_manifest(model, sequences, layers, files)
    write_text_atomically(out / "capture.json", json.dumps(manifest, indent=1) + "\n", "--out")
    return CaptureResult(str(out), str(model.weights), tuple(layers), sequences.tokens,
                         len(sequences.ids), model.d_model, tuple(str(f) for f in files))


def _capture_layers(model: Transformer, sequences: Sequences, layers: Sequence[int], out: Path,
                    inputs: Sequence[Path | None], batch_tokens: int | None,
                    progress: Callback | None) -> None:
    """The walk writing each selected layer's file, one write in flight."""
    from ffncli.compute.forward.walk import walk

    shape = (sequences.tokens, model.d_model)
    with contextlib.ExitStack() as stack:
        current: dict[str, Any] = {"layer": None, "writer": None, "pending": [],
                                   "published": False}

        def before_publishing(exc_type: type[BaseException] | None, *_: object) -> bool:
            """The first file is about to replace one of a previous capture (--force): its
            capture.json goes first, so that it never describes a mix of two runs (it stays
            while nothing is replaced: an error before then keeps the old capture whole)."""
            if exc_type is None and not current["published"]:
                current["published"] = True
                try:
                    os.unlink(out / "capture.json")
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise OutputError(f"option --out: cannot remove the previous capture's "
                                      f"{out / 'capture.json'}: {exc.strerror or exc}") from None
            return False

        def visit(layer: int, block: Block, x: np.ndarray) -> None:
            if current["layer"] != layer:
                if current["writer"] is not None:
                    stack.close()  # the previous layer's file is complete: publish it
                current["pending"] = []
                current["writer"] = stack.enter_context(AtomicNpyWriter(
                    layer_file(out, layer), shape, np.dtype(np.float32), force=True,
                    inputs=tuple(inputs)))
                stack.push(before_publishing)  # runs before the writer's exit publishes
                current["layer"] = layer
            writer, pending = current["writer"], current["pending"]
            chunk = np.ascontiguousarray(x, dtype=np.float32)
            writer.write(chunk)
            pending.append(chunk)
            if len(pending) > 1:  # keep one write in flight, overlapping the next batch
                writer.wait(pending.pop(0))

        walk(model, sequences.ids, layers, visit, batch_tokens=batch_tokens, progress=progress)


def capture_manifest(model: Transformer, sequences: Sequences, layers: Sequence[int],
                     files: Sequence[Path]) -> dict[str, Any]:
    return {
        "model": str(model.weights),
        "family": model.spec.family,
        "d_model": model.d_model,
        "dtype": "float32",
        "layers": list(layers),
        "files": [f.name for f in files],
        "tokens": sequences.tokens,
        "input": {"path": sequences.source, "sha256": sequences.sha256},
        "sequences": [{"line": line, "ids": ids.tolist()}
                      for line, ids in zip(sequences.lines, sequences.ids, strict=True)],
    }
