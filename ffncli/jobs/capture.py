"""``capture``: real text through the whole model, every selected layer's FFN input written to
``DIR/layer{N}.npy`` and ``DIR/capture.json``, all or nothing: the files are written into a
hidden folder inside ``DIR`` and moved into place only when every one is complete. A failed
or interrupted capture (a signal, a layer the weights do not hold, a full disk) removes what
it wrote, and the folder if it made it; what was in ``DIR`` before stays as it was.

It is one walk (:func:`ffncli.compute.forward.walk.walk`) over the sequences, as the sweep of
``relu-stats --text`` is with another visitor: layer by layer (one layer's weights in memory),
batch by batch, each selected layer's FFN input handed over in text order.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.base.files import PARAMETERS, Naming, create_hidden, output_folder
from ffncli.base.signals import signals_held
from ffncli.errors import OutputError
from ffncli.formats.npy import AtomicNpyWriter
from ffncli.jobs.progress import Callback

if TYPE_CHECKING:
    from ffncli.compute.forward.layer import Block
    from ffncli.compute.forward.transformer import Transformer
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
            batch_tokens: int | None = None, progress: Callback | None = None,
            names: Naming = PARAMETERS) -> CaptureResult:
    """Write each selected layer's FFN input, float32 (tokens, d_model) in text order, to
    ``out/layer{N}.npy``, and ``out/capture.json``: all of them, or (on any error or signal)
    none, and ``out`` as it was. Errors name ``out`` and ``force`` as ``names`` says (the
    command passes its options)."""
    created, staging = False, None
    try:
        with signals_held():  # a signal now lands where both names are kept
            created = output_folder(out, writer="capture", force=force, inputs=inputs,
                                    names=names)
            staging = Path(create_hidden(out, "capture", names.out, os.mkdir)[0])
        _capture_layers(model, sequences, layers, staging, out, inputs, batch_tokens,
                        progress, names)
        files = tuple(layer_file(out, i) for i in layers)
        manifest = capture_manifest(model, sequences, layers, files)
        _write_new(staging / "capture.json", json.dumps(manifest, indent=1) + "\n",
                   out / "capture.json", names)
        _publish(staging, out, [*(f.name for f in files), "capture.json"], force, names)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if created:  # the folder this run made goes too
            with contextlib.suppress(OSError):
                os.rmdir(out)
        raise
    with contextlib.suppress(OSError):
        os.rmdir(staging)
    return CaptureResult(str(out), str(model.weights), tuple(layers), sequences.tokens,
                         len(sequences.ids), model.d_model, tuple(str(f) for f in files))


def _write_new(path: Path, text: str, shown: Path, names: Naming) -> None:
    """A new file in the staging folder, synced (errors name ``shown``, its place in --out):
    a full disk fails here, before any file is moved into --out."""
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise OutputError(f"{names.out}: cannot write {shown}: {exc.strerror or exc}") \
            from None


_NO_LINKS = tuple(getattr(errno, name) for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV",
                                                    "EMLINK", "ENOSYS")
                  if hasattr(errno, name))  # hard links refused by the file system


def _publish(staging: Path, out: Path, files: Sequence[str], force: bool, names: Naming
             ) -> None:
    """Move the complete files from ``staging`` into ``out``, capture.json last. With
    ``force`` a previous capture's capture.json goes first (it must never describe a mix of
    two runs) and its files are replaced; without it, a file that appeared in ``out`` while
    this run worked is left alone and the run fails. Interrupted half-way, the files moved
    so far are removed again."""
    moved: list[Path] = []
    try:
        if force:
            try:
                os.unlink(out / "capture.json")
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise OutputError(f"{names.out}: cannot remove the previous capture's "
                                  f"{out / 'capture.json'}: {exc.strerror or exc}") from None
        for name in files:
            _move(staging / name, out / name, force, names)
            moved.append(out / name)
    except BaseException:
        for path in moved:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise


def _move(source: Path, target: Path, force: bool, names: Naming) -> None:
    """One rename; without ``force`` a hard link first, which fails if ``target`` exists."""
    try:
        if force:
            os.replace(source, target)
            return
        try:
            os.link(source, target)
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            if os.path.lexists(target):  # a file system without hard links
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST)) from None
            os.replace(source, target)
            return
        os.unlink(source)
    except FileExistsError:
        raise OutputError(f"{names.out}: {target} appeared while this run was writing; it "
                          f"was left alone (pass {names.force} to replace it)") from None
    except OSError as exc:
        raise OutputError(f"{names.out}: cannot write {target}: {exc.strerror or exc}") \
            from None


def _capture_layers(model: Transformer, sequences: Sequences, layers: Sequence[int],
                    staging: Path, out: Path, inputs: Sequence[Path | None],
                    batch_tokens: int | None, progress: Callback | None,
                    names: Naming = PARAMETERS) -> None:
    """The walk writing each selected layer's file into ``staging`` (errors name its place in
    ``out``), one write in flight."""
    from ffncli.compute.forward.walk import walk

    shape = (sequences.tokens, model.d_model)
    with contextlib.ExitStack() as stack:
        current: dict[str, Any] = {"layer": None, "writer": None, "pending": []}

        def visit(layer: int, block: Block, x: np.ndarray) -> None:
            if current["layer"] != layer:
                if current["writer"] is not None:
                    stack.close()  # the previous layer's file is complete
                current["pending"] = []
                current["writer"] = stack.enter_context(AtomicNpyWriter(
                    layer_file(staging, layer), shape, np.dtype(np.float32), force=True,
                    inputs=tuple(inputs), shown=layer_file(out, layer), names=names))
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
