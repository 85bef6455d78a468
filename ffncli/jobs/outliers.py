"""``ffncli outliers``: one walk over a text (:func:`ffncli.compute.forward.walk.walk_variants`,
as the sweep and capture walk) keeping, per layer, the largest |value| of the FFN's input, its
hidden layer, its output and the residual stream after the layer, where each occurs, and the
flags the rules of :mod:`ffncli.analysis.outliers` raise; with ``--confirm``, the candidates
changed and scored against the dense model beside random changes of their kind (the null), in
one walk of ``perplexity``'s pipeline (:func:`ffncli.jobs.variants.walk_part`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ffncli.analysis.experts import expert_inputs
from ffncli.analysis.outliers import (
    LayerOutliers,
    LayerPart,
    Peak,
    finish,
    persistence,
    super_experts,
    super_weight_layers,
)
from ffncli.base.validate import whole
from ffncli.compute.engine import Hooks, Watch
from ffncli.compute.ffn import (
    Activation,
    GatedWeights,
    MoEWeights,
    as_activation,
    pre_activation,
)
from ffncli.compute.forward.walk import walk_variants
from ffncli.errors import InputError
from ffncli.jobs.confirm import (
    DEFAULT_CTX,
    DEFAULT_REPEATS,
    confirm,
    confirm_plan,
    down_matrix,
    down_tensor,
    file_index,
)
from ffncli.jobs.outlier_results import (
    Candidate,
    ExpertPeak,
    Found,
    LayerRow,
    MassiveChannel,
    OutliersResult,
    Place,
)
from ffncli.jobs.progress import Callback, Progress
from ffncli.jobs.resolve import load_document, model_tokenizer, open_text
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    from ffncli.compute.ffn import ExpertWeights
    from ffncli.compute.forward.layer import Block, Ffn
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences
    from ffncli.jobs.choices import ModelChoice, TextChoice



# ---------------------------------------------------------------------------------------------
# The walk: each layer watched as it is computed.


class LayerWatch(Watch):
    """Layer i's FFN as the walk computes it (the walk's ``ffn``), watched: the input and
    output peaks from each batch, the hidden peak from the engine's own blocks (the gate's
    product done here as the engine does it: the same bits), a mixture's experts recomputed
    from their inputs; ``after`` sees the layer's output, the residual stream. Batches come
    in text order: rows count from ``base``."""

    def __init__(self, block: Block, d: int, base: int) -> None:
        self.engine, self.base, self.chunk = block.engine, base, base
        self.part = LayerPart.empty(d)
        self.moe = isinstance(self.engine.weights, MoEWeights)
        self.gated = isinstance(self.engine.weights, GatedWeights)
        self.found: list[Peak] = []
        self.row_mag = self.row_value = self.row_unit = self.row_expert = np.zeros(0)

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        peaks = self.part.peaks
        peaks["ffn_input"].see(x, self.base)
        n = x.shape[0]
        self.row_mag, self.row_value = np.full(n, -1.0), np.zeros(n)
        self.row_unit, self.row_expert = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.part.rows.append((self.base, self.row_mag, self.row_value, self.row_unit,
                               self.row_expert))
        if self.moe:
            self.engine(x, out)
            self._experts(x)
        else:
            self.chunk = self.base
            self.engine(x, out, watch=self)
        peaks["ffn_output"].see(out, self.base)

    def hooks(self, x: np.ndarray) -> Hooks:
        base = self.chunk

        def see(lo: int, hi: int, a: np.ndarray) -> None:
            p = Peak()
            p.see(a, base + lo)
            self.found.append(p)
            self._rows(base - self.base + lo, a, 0)

        def after(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
            see(lo, hi, a)

        def gate(lo: int, hi: int, a: np.ndarray, u: np.ndarray) -> None:
            np.multiply(a, u, out=a)  # the engine's own step, then seen
            see(lo, hi, a)

        return Hooks(gate=gate) if self.gated else Hooks(after=after)

    def seen(self, x: np.ndarray, out: np.ndarray) -> None:
        for p in self.found:
            self.part.peaks["hidden"].add(p)
        self.found = []
        self.chunk += x.shape[0]

    def _rows(self, first: int, h: np.ndarray, expert: int,
              rows: np.ndarray | None = None) -> None:
        """Each token's largest |hidden| (batch rows ``first`` .., or ``rows``), kept where it
        is larger than one seen before (another expert's)."""
        if h.shape[0] == 0:
            return
        unit = np.argmax(np.abs(h), axis=1)
        value = h[np.arange(h.shape[0]), unit].astype(np.float64)
        at = rows if rows is not None else np.arange(first, first + h.shape[0])
        better = np.abs(value) > self.row_mag[at]
        at = at[better]
        self.row_mag[at], self.row_value[at] = np.abs(value[better]), value[better]
        self.row_unit[at], self.row_expert[at] = unit[better], expert

    def _experts(self, x: np.ndarray) -> None:
        """Each expert's hidden layer and output on the tokens routed to it (plainly, from
        compute/ffn.py's formulas): the hidden peak (and its expert), each expert's peak."""
        p = self.engine.weights
        assert isinstance(p, MoEWeights)

        act = as_activation(self.engine.act)
        for e, w, rows in expert_inputs(self.engine, x):
            if rows.size == 0:
                continue
            h = expert_hidden(x[rows], w, act)
            y = h @ w.w2 + (w.b2 if w.b2 is not None else 0)
            hidden = Peak()
            hidden.see(h, 0)
            hidden.row = self.base + int(rows[hidden.row])
            self.part.peaks["hidden"].add(hidden)
            self._rows(0, h, e, rows)
            out = Peak()
            out.see(y, 0)
            out.row = self.base + int(rows[out.row])
            self.part.experts.setdefault(e, Peak()).add(out)

    def after(self, out: np.ndarray) -> None:
        """The layer's output of this batch: the residual stream after the layer."""
        self.part.peaks["residual"].see(out, self.base)
        self.part.channels.see(out, self.base)
        self.part.held.append((self.base, np.array(out, dtype=np.float32)))
        self.part.tokens += out.shape[0]
        self.base += out.shape[0]


def expert_hidden(x: np.ndarray, p: ExpertWeights, act: Activation | str) -> np.ndarray:
    """act(x W1 + b1), or act(x W + b) * (x V + c): one expert's hidden layer, plainly."""
    h = as_activation(act)(pre_activation(x, p))
    if isinstance(p, GatedWeights):
        up = x @ p.v
        if p.c is not None:
            up += p.c
        h = h * up
    return np.asarray(h)


def outlier_parts(model: Transformer, sequences: Sequence[np.ndarray], *, base: int = 0,
                  batch_tokens: int | None = None, progress: Callback | None = None,
                  finished: bool = True) -> list[LayerPart] | list[LayerOutliers]:
    """Every layer's part over ``sequences`` (their first token is row ``base`` of the whole
    text): finished as the walk leaves each layer (memory: one layer's residual stream), or,
    not ``finished``, kept whole to merge with other parts' (:func:`merge_parts`)."""
    d = model.d_model
    done: list[LayerPart | LayerOutliers] = []
    current: dict[int, LayerWatch] = {}

    def close(below: int) -> None:
        for i in [i for i in current if i < below]:
            w = current.pop(i)
            done.append(finish(i, w.part) if finished else w.part)

    def ffn(i: int, v: int, block: Block) -> Ffn:
        close(i)
        current[i] = LayerWatch(block, d, base)
        return current[i]

    def after(i: int, v: int, block: Block, out: np.ndarray) -> None:
        current[i].after(out)

    walk_variants(model, sequences, 1, lambda i, v, block, x: None,
                  layers=range(model.n_layers), ffn=ffn, batch_tokens=batch_tokens,
                  progress=progress, after=after)
    close(model.n_layers)
    return done  # type: ignore[return-value]


def merge_parts(parts: Sequence[Sequence[LayerPart]]) -> list[LayerOutliers]:
    """The layers of many parts of a text (each a list of :class:`LayerPart`, one a layer),
    merged and finished: what one walk over the whole text finds."""
    merged = [LayerPart.empty(p.channels.magnitude.size) for p in parts[0]]
    for layers in parts:
        for m, p in zip(merged, layers, strict=True):
            m.add(p)
    return [finish(i, m) for i, m in enumerate(merged)]


# ---------------------------------------------------------------------------------------------
# The result: where each peak is, and what the rules flag.


class Places:
    """Token rows of the whole text to :class:`Place`: sequence, position, id, text."""

    def __init__(self, sequences: Sequences, text: object | None = None) -> None:
        self.ids = sequences.ids
        self.starts = np.concatenate([[0], np.cumsum([len(s) for s in self.ids])])
        self.text = text

    def __call__(self, row: int) -> Place:
        s = int(np.searchsorted(self.starts, row, side="right")) - 1
        token = int(self.ids[s][row - self.starts[s]])
        backend = getattr(self.text, "_backend", None)
        text = backend.id_to_token(token) if backend is not None else None
        return Place(s + 1, int(row - self.starts[s]), token, text)


def build_result(model: Transformer, sequences: Sequences, layers: list[LayerOutliers],
                 places: Places) -> OutliersResult:
    """The per-layer rows and every flag, from the finished layers."""

    def found(p: Peak) -> Found:
        return Found(p.magnitude, p.value, places(p.row), p.channel)

    flagged = super_weight_layers(layers)
    rows = tuple(LayerRow(x.layer, {k: found(p) for k, p in x.peaks.items()}, x.median,
                          x.threshold, tuple(m.channel for m in x.massive), f)
                 for x, f in zip(layers, flagged, strict=True))
    massive, seen = [], set()
    for n, x in enumerate(layers):
        for m in x.massive:
            if m.channel in seen:
                continue
            seen.add(m.channel)
            massive.append(MassiveChannel(x.layer, m.channel, found(m.peak), m.count, m.mean,
                                          tuple(persistence(layers, m.channel, n)),
                                          m.row_means, x.median))
    candidates = []
    moe = model.spec.ffn.is_moe
    for x, f in zip(layers, flagged, strict=True):
        if not f:
            continue
        h, o = x.hidden_at_output, x.peaks["ffn_output"]
        expert = x.expert_at_output if moe else None
        name, linear, stacked = down_tensor(model, x.layer, expert)
        w = down_matrix(model, x.layer, expert)[h.channel, o.channel]
        candidates.append(Candidate(x.layer, expert, name,
                                    file_index(linear, stacked, expert, h.channel, o.channel),
                                    h.channel, o.channel, float(w), found(h), found(o)))
    cut, chosen = super_experts(layers)
    experts = tuple(ExpertPeak(x.layer, e, p.magnitude, places(p.row), p.channel,
                               (x.layer, e) in chosen)
                    for x in layers for e, p in sorted(x.experts.items()))
    return OutliersResult(str(model.weights), sequences.source, sequences.tokens,
                          len(sequences.ids), rows, tuple(massive), tuple(candidates), experts,
                          cut if experts else None)


def find_outliers(model: Transformer, sequences: Sequences, places: Places, *,
                  batch_tokens: int | None = None, progress: Callback | None = None
                  ) -> OutliersResult:
    """The walk over the text, its layers finished as it goes, and the flags."""
    layers = outlier_parts(model, sequences.ids, batch_tokens=batch_tokens, progress=progress)
    return build_result(model, sequences, layers, places)  # type: ignore[arg-type]


def run_outliers(choice: ModelChoice, text: TextChoice, *, confirm_it: bool = False,
                 repeats: int = DEFAULT_REPEATS, seed: int = 0, ctx: int | None = None,
                 bar: Progress | None = None) -> OutliersResult:
    """``ffncli outliers``: the model opened once, the text read, the walk; with
    ``confirm_it``, the changes scored."""
    if not text.given:
        raise InputError("outliers: give the text with --text FILE or its token ids with "
                         "--ids FILE")
    if not confirm_it and (ctx is not None or repeats != DEFAULT_REPEATS or seed != 0):
        raise InputError("options --ctx, --repeats and --seed go with --confirm")
    forward, sequences = open_text(choice, text, Overrides())
    with forward:
        whole("option --repeats", repeats, 1, 100)
        scored = None
        if confirm_it:  # checked before the walk
            document, bos = load_document(text.text, text.ids, forward)
            scored = confirm_plan(forward, document, bos, DEFAULT_CTX if ctx is None else ctx,
                                  repeats)
        tokenizer = model_tokenizer(forward) if text.text is not None else None
        places = Places(sequences, tokenizer)
        if bar is not None:
            bar.start(sequences.tokens * forward.n_layers, "tokens x layers",
                      per=forward.n_layers)
        result = find_outliers(forward, sequences, places,
                               progress=bar.update if bar is not None else None)
        if scored is not None:
            result = replace(result, confirm=confirm(forward, scored, result, repeats=repeats,
                                                     seed=seed, progress=bar))
    return result
