"""Real text through the whole model: every layer's FFN input, written (``capture``) or
counted on the fly (``relu-stats --text``).

Both are one :func:`ffncli.forward.walk` over the sequences with a different visitor: the walk
goes layer by layer (one layer's weights in memory), batch by batch (one batch's activations),
and hands each selected layer's FFN input to the visitor in text order. The statistics are the
mergeable accumulators of :mod:`ffncli.sparsity`, so a run split over many machines only has to
merge what each produced.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.errors import InputError, OutputError
from ffncli.files import same_file, write_text_atomically
from ffncli.sparsity import (
    CALIBRATION_TOKENS,
    SMALL_OVERLAP,
    Rule,
    SparsityAccumulator,
    SparsityResult,
    calibrate_threshold,
    check_rule,
    describe_rule,
)
from ffncli.tokens import AtomicNpyWriter
from ffncli.validate import fail

if TYPE_CHECKING:
    from ffncli.forward import Block, Transformer
    from ffncli.text import Sequences

Progress = Callable[[int], None]
CATS_SHARE = 0.5  # the sweep's CATS column: the threshold that makes half the units inactive


def parse_layers(text: str | None, n_layers: int) -> tuple[int, ...]:
    """``--layer``: ``N``, ``A-B`` (both included) or ``all`` (the default) of ``n_layers``."""
    if text is None or text == "all":
        return tuple(range(n_layers))
    first, dash, last = text.partition("-")
    try:  # ASCII digits only: str.isdigit() also takes '٣' and '１'
        a = int(first) if first.isascii() and first.isdigit() else -1
        b = (int(last) if last.isascii() and last.isdigit() else -1) if dash else a
    except ValueError:  # digits beyond int()'s limit
        a = b = -1
    if a < 0 or b < 0:
        raise fail("option --layer", "a layer N, a range A-B or all", text)
    if a > b:
        raise InputError(f"option --layer: the range {text} runs backwards; write {b}-{a}")
    if b >= n_layers:
        raise fail("option --layer", f"layers of 0-{n_layers - 1}", text)
    return tuple(range(a, b + 1))


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


def prepare_out(out: Path, force: bool, inputs: Sequence[Path | None]) -> bool:
    """``--out DIR``: created if missing (its parent must exist); an existing folder must be
    empty unless ``force``; never an input (a model folder) nor a folder holding one. True
    when it was created."""
    try:
        entries = os.listdir(out)
    except FileNotFoundError:
        if os.path.islink(out):
            raise OutputError(f"option --out: {out} is a symbolic link to "
                              f"{os.readlink(out)}, which does not exist") from None
        try:
            os.mkdir(out)
        except FileNotFoundError:
            raise OutputError(f"option --out: folder {out.parent} does not exist") from None
        except OSError as exc:
            raise OutputError(f"option --out: cannot create {out}: "
                              f"{exc.strerror or exc}") from None
        return True
    except NotADirectoryError:
        raise OutputError(f"option --out: {out} is a file; capture writes a folder") from None
    except OSError as exc:
        raise OutputError(f"option --out: cannot use {out}: {exc.strerror or exc}") from None
    visible = [e for e in entries if not e.startswith(".")]
    if visible and not force:
        raise OutputError(f"option --out: {out} is not empty ({len(visible)} entries); pass "
                          "--force to write into it")
    for source in inputs:
        if source is None:
            continue
        if same_file(out, source):
            raise OutputError(f"option --out: {out} is an input of this command (the model "
                              "folder); choose another folder")
        for name in entries:
            if same_file(out / name, source):
                raise OutputError(f"option --out: {out} holds the input {source}; choose "
                                  "another folder")
    return False


def capture(model: Transformer, sequences: Sequences, layers: Sequence[int], out: Path, *,
            force: bool = False, inputs: Sequence[Path | None] = (), batch_tokens: int = 4096,
            progress: Progress | None = None) -> CaptureResult:
    """Write each selected layer's FFN input, float32 (tokens, d_model) in text order, to
    ``out/layer{N}.npy`` (each file atomically), then ``out/capture.json``."""
    created = prepare_out(out, force, inputs)
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
                    inputs: Sequence[Path | None], batch_tokens: int,
                    progress: Progress | None) -> None:
    """The walk writing each selected layer's file, one write in flight."""
    from ffncli.forward import walk

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


# ---------------------------------------------------------------------------------------------
# relu-stats --text: one accumulator per layer, fed as the walk goes


@dataclass(frozen=True)
class LayerStats:
    layer: int
    stats: SparsityResult
    cats_threshold_50: float  # the |act| that half of the first tokens' units stay under


@dataclass(frozen=True)
class SweepResult:
    model: str
    source: str
    tokens: int
    sequences: int
    definition: str
    layers: tuple[LayerStats, ...]


class LayerSweep:
    """One layer's statistics on its real input, fed batch by batch in text order.

    The CATS column (and with ``target`` the rule's threshold) is calibrated on the text's
    first ``CALIBRATION_TOKENS`` tokens, whatever the batches: the first batches are held until
    that many have come, or the text has ended. ``calibration`` (cats, threshold) skips that,
    for a part of a text whose first tokens were calibrated elsewhere (a cluster's shards)."""

    def __init__(self, block: Block, tokens: int, threshold: float | None,
                 target: float | None,
                 calibration: tuple[float, float | None] | None = None) -> None:
        self.engine, self.tokens = block.engine, tokens
        self.threshold, self.target = threshold, target
        self.held: list[np.ndarray] = []
        self.held_rows = 0
        self.cats = float("nan")
        self.acc: SparsityAccumulator | None = None
        if calibration is not None:
            self._start(*calibration)

    def calibrate(self, sample: np.ndarray) -> tuple[float, float | None]:
        """(the CATS threshold at 50%, the rule's threshold) on these tokens."""
        sample = np.ascontiguousarray(sample[:CALIBRATION_TOKENS], dtype=self.engine.dtype)
        cats = calibrate_threshold(self.engine, sample, CATS_SHARE)
        threshold = self.threshold if self.target is None else \
            calibrate_threshold(self.engine, sample, self.target)
        return cats, threshold

    def _start(self, cats: float, threshold: float | None) -> None:
        self.cats = cats
        rule = Rule(threshold, describe_rule(self.engine.act.name, threshold, self.target))
        self.acc = SparsityAccumulator(self.engine, rule,
                                       keep_masks=self.tokens <= SMALL_OVERLAP)

    def update(self, x: np.ndarray) -> None:
        if self.acc is None:
            self.held.append(np.array(x, dtype=self.engine.dtype))  # the walk reuses x
            self.held_rows += x.shape[0]
            if self.held_rows >= min(CALIBRATION_TOKENS, self.tokens):
                self._release()
            return
        rows = self.engine.chunk_tokens
        for start in range(0, x.shape[0], rows):
            self.acc.update(x[start:start + rows])

    def _release(self) -> None:
        held = np.concatenate(self.held) if self.held else \
            np.empty((0, self.engine.d_model), self.engine.dtype)
        self.held, self.held_rows = [], 0
        self._start(*self.calibrate(held))
        self.update(held)

    def result(self, layer: int) -> LayerStats:
        if self.acc is None:
            self._release()
        assert self.acc is not None
        return LayerStats(layer, self.acc.result(), self.cats)


def sweep(model: Transformer, sequences: Sequences, layers: Sequence[int], *,
          threshold: float | None = None, target_sparsity: float | None = None,
          batch_tokens: int = 4096, progress: Progress | None = None) -> SweepResult:
    """The sparsity statistics of every selected layer's FFN on its real input."""
    from ffncli.forward import walk

    check_rule(threshold, target_sparsity)
    done: dict[int, LayerStats] = {}
    current: list[tuple[int, LayerSweep]] = []  # the layer being walked

    def finish() -> None:  # the walk has left the layer: its weights can go
        if current:
            layer, open_sweep = current.pop()
            done[layer] = open_sweep.result(layer)

    def visit(layer: int, block: Block, x: np.ndarray) -> None:
        if not current or current[0][0] != layer:
            finish()
            current.append((layer, LayerSweep(block, sequences.tokens, threshold,
                                              target_sparsity)))
        current[0][1].update(x)

    walk(model, sequences.ids, layers, visit, batch_tokens=batch_tokens, progress=progress)
    finish()
    results = tuple(done[i] for i in layers)
    definition = results[0].stats.rule.description if results else ""
    return SweepResult(str(model.weights), sequences.source, sequences.tokens, len(sequences.ids),
                       definition, results)
