"""``ffncli outliers``: one walk over a text (:func:`ffncli.compute.forward.walk.walk_variants`,
as the sweep and capture walk) keeping, per layer, the largest |value| of the FFN's input, its
hidden layer, its output and the residual stream after the layer, where each occurs, and the
flags the rules of :mod:`ffncli.analysis.outliers` raise; with ``--confirm``, the candidates
changed and scored against the dense model beside random changes of their kind (the null), in
one walk of ``perplexity``'s pipeline (:func:`ffncli.jobs.variants.walk_part`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import numpy as np

from ffncli.analysis.experts import expert_inputs
from ffncli.analysis.outliers import (
    LayerOutliers,
    LayerPart,
    Peak,
    finish,
    is_massive,
    persistence,
    super_experts,
    super_weight_layers,
)
from ffncli.analysis.perplexity import Protocol, check_protocol
from ffncli.analysis.quantiles import quantile
from ffncli.base.validate import whole
from ffncli.compute.engine import Engine, Hooks, Watch
from ffncli.compute.ffn import (
    Activation,
    GatedWeights,
    MoEWeights,
    as_activation,
    pre_activation,
)
from ffncli.compute.forward.walk import walk_variants
from ffncli.errors import InputError
from ffncli.formats.tensors import GgufTensors
from ffncli.jobs.perplexity import Plan, plan
from ffncli.jobs.progress import Callback, Progress
from ffncli.jobs.resolve import load_document, model_tokenizer, open_text
from ffncli.jobs.variants import Change, walk_part
from ffncli.specs.archs import ffn_layout
from ffncli.specs.layouts import GGUF_FFN, GGUF_GATED_FFN, GGUF_MOE_FFN
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    from ffncli.compute.ffn import ExpertWeights, Weights
    from ffncli.compute.forward.layer import Block, Ffn
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences
    from ffncli.jobs.choices import ModelChoice, TextChoice

CONFIRMED = 3  # candidates and massive channels confirmed at most (the largest first)
NULL_POOL = 100  # the null draws from the weights nearest the candidate's |w|
DEFAULT_REPEATS = 5
DEFAULT_CTX = 512  # --confirm's chunks, as perplexity's


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


@dataclass(frozen=True)
class Place:
    """A token: its sequence (1-based), position in it (0-based), id and text (None without
    a tokenizer)."""

    sequence: int
    position: int
    token: int
    text: str | None


@dataclass(frozen=True)
class Found:
    magnitude: float
    value: float
    place: Place
    channel: int


@dataclass(frozen=True)
class LayerRow:
    layer: int
    peaks: dict[str, Found]
    median: float
    threshold: float
    massive_channels: tuple[int, ...]
    spike: bool  # Yu et al.'s: hidden and output spikes at the same token


@dataclass(frozen=True)
class MassiveChannel:
    """A channel of the residual stream first massive after ``layer``: its largest entry
    there, how many entries meet the rule, their mean, and every layer it stays massive."""

    layer: int
    channel: int
    peak: Found
    count: int
    mean: float
    persists: tuple[int, ...]
    row_means: np.ndarray  # every channel's mean over the rows where this one is massive
    median: float


@dataclass(frozen=True)
class Candidate:
    """A super-weight candidate: the down projection's weight from input unit ``unit`` to
    output channel ``channel`` of ``layer`` (``expert`` of a mixture), as the file names it."""

    layer: int
    expert: int | None
    tensor: str
    index: tuple[int, ...]  # in the file's order of the tensor's axes
    unit: int
    channel: int
    weight: float
    hidden: Found
    output: Found


@dataclass(frozen=True)
class ExpertPeak:
    layer: int
    expert: int
    magnitude: float
    place: Place
    channel: int
    super_expert: bool


@dataclass(frozen=True)
class Score:
    """A changed model against the dense one: decoders perplexity, mean KL(dense || changed)
    and top-1 agreement; encoders the mean cosines of the final hidden states."""

    perplexity: float | None = None
    kl_mean: float | None = None
    top1: float | None = None
    token_cosine: float | None = None
    sentence_cosine: float | None = None


@dataclass(frozen=True)
class Confirmation:
    """One change (``what``) and its null: the same change at random, ``repeats`` times."""

    what: str
    rule: str  # what was changed, and what the null changed
    changed: Score
    null: tuple[Score, ...]


@dataclass(frozen=True)
class ConfirmResult:
    protocol: str
    tokens_scored: int
    perplexity: float | None
    repeats: int
    seed: int
    items: tuple[Confirmation, ...]


@dataclass(frozen=True)
class OutliersResult:
    model: str
    source: str
    tokens: int
    sequences: int
    layers: tuple[LayerRow, ...]
    massive: tuple[MassiveChannel, ...]
    candidates: tuple[Candidate, ...]
    experts: tuple[ExpertPeak, ...]
    super_expert_cut: float | None
    confirm: ConfirmResult | None = None


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


def down_tensor(model: Transformer, layer: int, expert: int | None) -> tuple[str, bool, bool]:
    """The down projection's tensor of ``layer`` (``expert``) as the file names it, whether it
    is stored [out, in] (nn.Linear; Conv1D: [in, out]) and stacked [experts, out, in]."""
    if isinstance(model.tensors, GgufTensors):
        ffn = model.spec.ffn
        layout = GGUF_MOE_FFN if ffn.is_moe else GGUF_GATED_FFN if ffn.gated else GGUF_FFN
    else:
        found = ffn_layout(model.spec)
        assert found is not None  # the forward read the layer through it
        layout = found
    stem = layout.names["w2"].format(i=layer, e=expert or 0) + ".weight"
    return model.tensors.find(stem) or stem, layout.linear, layout.stacked


def down_matrix(model: Transformer, layer: int, expert: int | None) -> np.ndarray:
    """The down projection of ``layer`` (``expert``) in ffncli's [in, out] layout, read from
    the file (a GGUF block dequantised) as the forward reads it."""
    name, linear, stacked = down_tensor(model, layer, expert)
    array = model.tensors.read(name)
    if stacked:
        array = array[expert or 0]
    return np.asarray(array.T if linear else array, dtype=np.float64)


def file_index(linear: bool, stacked: bool, expert: int | None, unit: int, channel: int
               ) -> tuple[int, ...]:
    """The down projection's weight from ``unit`` to ``channel`` as the file indexes its
    tensor: [out, in] (nn.Linear, GGUF), [in, out] (Conv1D), [expert, out, in] (stacked)."""
    cell = (channel, unit) if linear else (unit, channel)
    return (expert or 0, *cell) if stacked else cell


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


# ---------------------------------------------------------------------------------------------
# --confirm: the changes, and their nulls.


class ZeroWeights:
    """The down projection of ``layer`` (``expert``) with the [in, out] ``cells`` zeroed."""

    def __init__(self, layer: int, expert: int | None, cells: Sequence[tuple[int, int]]
                 ) -> None:
        self.first, self.expert, self.cells = layer, expert, list(cells)

    def ffn(self, i: int, block: Block) -> Ffn | None:
        if i != self.first:
            return None
        engine = block.engine
        p = engine.weights
        if isinstance(p, MoEWeights):
            e = self.expert or 0
            experts = list(p.experts)
            experts[e] = self._zeroed(experts[e])
            changed: Weights = replace(p, experts=tuple(experts))
        else:
            changed = self._zeroed(p)
        zeroed = Engine(changed, engine.act, engine.chunk_tokens)

        def run(x: np.ndarray, out: np.ndarray) -> None:
            zeroed(x, out=out)

        return run

    def _zeroed(self, p: ExpertWeights) -> ExpertWeights:
        w2 = np.array(p.w2)
        for j, o in self.cells:
            w2[j, o] = 0
        return replace(p, w2=w2)

    def after(self, i: int, out: np.ndarray) -> None:
        return None

    def dense(self, i: int, out: np.ndarray) -> None:
        return None


class DenseStream:
    """The dense model's residual stream after ``layer`` in --confirm's walk, every value kept
    as the dense pass goes (its owner's calls alone: the changes of one layer share it), and
    its exact median |h| over every token and channel once the changed passes begin."""

    def __init__(self, layer: int) -> None:
        self.layer, self.owner = layer, cast(object, None)
        self.held: list[np.ndarray] = []
        self._median: float | None = None

    def see(self, caller: object, i: int, out: np.ndarray) -> None:
        self.owner = caller if self.owner is None else self.owner
        if i == self.layer and caller is self.owner:
            self.held.append(np.abs(out).astype(np.float32))

    @property
    def median(self) -> float:
        if self._median is None:
            self._median = quantile(np.concatenate(self.held), 0.5)
            self.held = []
        return self._median


class SetChannel:
    """After ``layer``, at the rows where ``channel`` is massive (Sun et al.'s rule against
    the median of the dense model's stream there, on the text --confirm scores), ``target``
    set to ``value``."""

    def __init__(self, stream: DenseStream, channel: int, target: int, value: float) -> None:
        self.stream, self.first = stream, stream.layer
        self.channel, self.target, self.value = channel, target, value

    def ffn(self, i: int, block: Block) -> Ffn | None:
        return None

    def dense(self, i: int, out: np.ndarray) -> None:
        self.stream.see(self, i, out)

    def after(self, i: int, out: np.ndarray) -> None:
        if i == self.first:
            hit = is_massive(np.abs(out[:, self.channel]), self.stream.median)
            out[hit, self.target] = self.value


def null_cells(w2: np.ndarray, cells: Sequence[tuple[int, int]], rng: np.random.Generator
               ) -> list[tuple[int, int]]:
    """One weight for each of ``cells``, drawn from the NULL_POOL weights of the matrix
    nearest its |w| (the cells themselves left out), none twice."""
    mags = np.abs(w2).ravel()
    taken = {j * w2.shape[1] + o for j, o in cells}
    out: list[tuple[int, int]] = []
    for j, o in cells:
        order = np.argsort(np.abs(mags - abs(w2[j, o])), kind="stable")
        pool = [int(k) for k in order[:NULL_POOL + len(taken) + len(out)]
                if int(k) not in taken][:NULL_POOL]
        k = pool[int(rng.integers(len(pool)))]
        taken.add(k)
        out.append(divmod(k, w2.shape[1]))
    return out


def confirm_changes(model: Transformer, result: OutliersResult, repeats: int, seed: int
                    ) -> list[tuple[str, str, list[Change]]]:
    """Each confirmed change and its ``repeats`` nulls: (what, rule, [change, null...])."""
    rng = np.random.default_rng(seed)
    plans: list[tuple[str, str, list[Change]]] = []
    for c in result.candidates[:CONFIRMED]:
        w2 = down_matrix(model, c.layer, c.expert)
        cells = [(c.unit, c.channel)]
        nulls = [ZeroWeights(c.layer, c.expert, null_cells(w2, cells, rng))
                 for _ in range(repeats)]
        plans.append((f"{c.tensor}[{', '.join(map(str, c.index))}] = 0",
                      f"the weight zeroed; null: a weight of the same matrix among the "
                      f"{NULL_POOL} nearest its |w| ({abs(c.weight):.4g}) zeroed",
                      [ZeroWeights(c.layer, c.expert, cells), *nulls]))
    for m in result.massive[:CONFIRMED]:
        others = [c for c in range(model.d_model)
                  if c not in {x.channel for x in result.massive}]
        picks = rng.choice(others, size=min(repeats, len(others)), replace=False)
        stream = DenseStream(m.layer)
        plans.append((f"layer {m.layer} channel {m.channel} = its mean "
                      f"({m.row_means[m.channel]:.4g})",
                      "the channel set to its mean (over its massive entries in the outliers' "
                      "walk) where it is massive after the layer; null: another channel, at the "
                      "same tokens, set to its mean over the same entries",
                      [SetChannel(stream, m.channel, m.channel, float(m.row_means[m.channel])),
                       *(SetChannel(stream, m.channel, int(c), float(m.row_means[int(c)]))
                         for c in picks)]))
    return plans


def confirm_plan(model: Transformer, document: Sequences, bos: int | None, ctx: int,
                 repeats: int) -> Plan:
    """What ``--confirm`` scores, checked before the outliers' walk: a decoder's chunks of
    ``ctx`` (llama.cpp's protocol), an encoder's lines."""
    whole("option --repeats", repeats, 1, 100)
    protocol = None
    if model.has_head:
        protocol = Protocol(ctx)
        check_protocol(protocol, model.max_positions)
    elif ctx != DEFAULT_CTX:
        raise InputError(f"option --ctx: {model.spec.name} is an encoder: --confirm scores its "
                         "lines, not chunks (give no --ctx)")
    return plan(model, document, protocol, bos=bos)


def confirm(model: Transformer, p: Plan, result: OutliersResult, *, repeats: int, seed: int,
            batch_tokens: int | None = None, progress: Progress | None = None
            ) -> ConfirmResult:
    """Every confirmed change and its nulls scored against the dense model in one walk of
    ``perplexity``'s pipeline, on the plan's windows (:func:`confirm_plan`)."""
    plans = confirm_changes(model, result, repeats, seed)
    changes = [c for _, _, cs in plans for c in cs]
    if progress is not None:
        progress.start(sum(len(s) for s in p.sequences) * model.n_layers * (1 + len(changes)),
                       "tokens x layers", per=model.n_layers * (1 + len(changes)))
    part = walk_part(model, model.head if p.decoder else None, p.sequences, p.firsts, (), (),
                     batch_tokens=batch_tokens, changes=changes,
                     progress=progress.update if progress is not None else None)

    def scored(k: int) -> Score:
        if p.decoder:
            a = part.agreements[k]
            return Score(perplexity=a.nll.perplexity, kl_mean=a.kl_mean, top1=a.top1)
        c = part.cosines[k]
        return Score(token_cosine=c.token_mean, sentence_cosine=c.sentence_mean)

    items, k = [], 0
    for what, rule, cs in plans:
        scores = [scored(k + n) for n in range(len(cs))]
        k += len(cs)
        items.append(Confirmation(what, rule, scores[0], tuple(scores[1:])))
    name = p.protocol.describe() if p.protocol is not None else \
        "each line of the text (cosines)"
    return ConfirmResult(name, part.nll.tokens, part.nll.perplexity if p.decoder else None,
                         repeats, seed, tuple(items))


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
