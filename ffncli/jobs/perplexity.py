"""``ffncli perplexity``: a model's perplexity on a text under a stated protocol, and what
sparsifying its FFNs costs: every target of a rule runs in the same walk as the dense model
(each layer's weights read once for all), calibrated on the dense model's own activations.

Decoders are scored by their LM head (perplexity, KL against dense, top-1 agreement); encoders,
which have none, by the cosine of their final hidden states and of mean-pooled sentence
embeddings, per line of the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.analysis.calibration import (
    Gathering,
    Magnitudes,
    calibration_rows,
    cuts_from,
    first_batches,
)
from ffncli.analysis.perplexity import (
    Agreement,
    Cosines,
    Nll,
    Protocol,
    add_cosines,
    chunks,
    score,
    scored_rows,
    windows,
)
from ffncli.base.validate import share
from ffncli.compute.sparse import RULES, Cut, SparseFfn, Tally
from ffncli.errors import InputError, SpecError
from ffncli.jobs.progress import Progress
from ffncli.jobs.thresholds import (
    Variant,
    check_layers,
    layer_ranges,
    load_thresholds,
    thresholds_json,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.families import Transformer
    from ffncli.compute.forward.layer import Block, Ffn, Head
    from ffncli.formats.text import Sequences
    from ffncli.jobs.choices import ModelChoice, TextChoice


# ---------------------------------------------------------------------------------------------
# What is asked.


def check_targets(rule: str | None, targets: Sequence[float]) -> None:
    """``--sparsify RULE --target-sparsity S[,S...]``: a rule and its shares, each or neither;
    run once, when :class:`Asked` is made."""
    if rule is None:
        if targets:
            raise InputError("option --target-sparsity needs --sparsify cats, teal or topk")
        return
    if rule not in RULES:
        raise InputError(f"option --sparsify: expected one of {', '.join(RULES)}, got "
                         f"{rule!r}")
    if not targets:
        raise InputError("option --sparsify needs --target-sparsity S[,S...], e.g. 0.5")
    for s in targets:
        share("option --target-sparsity", s)


def parse_targets(text: str | None) -> tuple[float, ...]:
    """``--target-sparsity 0.25,0.5``: the shares, in the order given, each once."""
    if text is None:
        return ()
    out: list[float] = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"option --target-sparsity: expected shares such as 0.5 or "
                             f"0.25,0.5, got {part.strip()!r}") from None
        value += 0.0  # -0 is 0 (a NaN is refused with the others, by check_targets)
        if value not in out:
            out.append(value)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# What comes back.


@dataclass(frozen=True)
class LayerCost:
    layer: int
    cut: Cut
    sparsity: float  # the unit share zeroed (teal: the multiply-add-weighted mean of its cuts)
    sparsity_in: float | None  # teal: the share of the FFN input zeroed
    sparsity_down: float | None  # teal: the share of the down projection's input zeroed
    ffn_error: float  # ||y_sparse - y_dense|| / ||y_dense||, the layer's FFN on its input
    macs_saved: float  # multiply-adds per token the zeroed entries save


@dataclass(frozen=True)
class VariantResult:
    rule: str
    target: float
    label: str
    layers: tuple[LayerCost, ...]
    sparsity: float
    macs_saved: float  # per token, over the selected layers
    macs: int  # the selected layers' FFN multiply-adds per token, dense
    perplexity: float | None = None
    nll_mean: float | None = None
    kl_mean: float | None = None
    top1: float | None = None
    token_cosine: float | None = None
    sentence_cosine: float | None = None
    worst_sentence: float | None = None


@dataclass(frozen=True)
class PerplexityResult:
    model: str
    source: str
    sha256: str
    kind: str  # "decoder" (scored by its LM head) or "encoder" (fidelity of hidden states)
    tokens: int  # of the document (decoder) or of all lines (encoder)
    windows: int  # chunks, windows or lines run
    dropped: int  # tokens past the last full chunk, left out
    bos: int | None
    protocol: Protocol | None
    tokens_scored: int
    perplexity: float | None
    nll_mean: float | None
    layers: tuple[int, ...]
    calibration: dict[str, object] | None
    variants: tuple[VariantResult, ...] = field(default=())
    # --save-thresholds' document: written by the command with --report, all or nothing
    thresholds: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------
# Calibration.


class _Cuts:
    """Each variant's cut in each selected layer: from a file, from the rule alone (topk), or
    calibrated on the dense model's first CALIBRATION_TOKENS FFN inputs of the layer, their
    magnitudes kept by variant 0's FFN (a :class:`Gathering`) as the walk computes it."""

    def __init__(self, variants: Sequence[Variant]) -> None:
        self.variants = variants
        self.wanted = [(w.rule, w.target) for w in variants if w.cuts is None]
        self.gathering = _needs_calibration(variants)
        self.gatherers: dict[int, Gathering] = {}
        self.cuts: dict[tuple[int, int], Cut] = {}

    def ffn(self, i: int, engine: Engine) -> Ffn | None:
        """Variant 0's FFN in selected layer i: the gathering one while layer i has no cuts."""
        for j in [j for j in self.gatherers if j < i]:
            self.finish(j, self.gatherers[j].d_ff)  # the walk has left layer j
        if not self.gathering or (i, 0) in self.cuts:
            return None
        g = self.gatherers.setdefault(i, Gathering(engine, self.wanted))
        g.engine = engine
        return g

    def finish(self, i: int, d_ff: int) -> None:
        """Every variant's cut in layer i, the calibrated ones from the magnitudes kept."""
        if (i, 0) in self.cuts:
            return
        calibrated = [n for n, w in enumerate(self.variants) if w.cuts is None]
        if calibrated:
            g = self.gatherers.pop(i, None)
            cuts = g.cuts() if g is not None else cuts_from(Magnitudes(), d_ff, self.wanted)
            self.cuts |= {(i, n): c for n, c in zip(calibrated, cuts, strict=True)}
        self.cuts |= {(i, n): w.cuts[i] for n, w in enumerate(self.variants)
                      if w.cuts is not None}

    def cut(self, i: int, v: int, d_ff: int) -> Cut:
        """Variant v's cut in layer i: the first call of a layer calibrates every variant's."""
        if (i, v) not in self.cuts:
            self.finish(i, d_ff)
        return self.cuts[i, v]


def _needs_calibration(variants: Sequence[Variant]) -> bool:
    return any(v.cuts is None and v.rule != "topk" for v in variants)


def calibration_walk(model: Transformer, sequences: Sequence[np.ndarray],
                     variants: Sequence[Variant], layers: Sequence[int],
                     batch_tokens: int | None = None) -> _Cuts:
    """Every variant's cut in every selected layer, calibrated on the dense model's first
    CALIBRATION_TOKENS tokens of ``sequences`` (in order): a walk of the first batches only,
    its FFNs computed and kept as in a walk over all of them."""
    from ffncli.compute.forward.walk import walk_variants

    cuts = _Cuts(variants)
    selected = set(layers)
    d_ff: dict[int, int] = {}

    def ffn(i: int, v: int, block: Block) -> Ffn | None:
        if i not in selected:
            return None
        d_ff[i] = block.engine.d_ff
        return cuts.ffn(i, block.engine)

    walk_variants(model, first_batches(sequences, batch_tokens)[0], 1, layers=layers, ffn=ffn,
                  batch_tokens=batch_tokens)
    for i in layers:
        cuts.finish(i, d_ff[i])
    cuts.gathering = False
    return cuts


def calibrate(model: Transformer, sequences: Sequence[np.ndarray], variants: Sequence[Variant],
              layers: Sequence[int], batch_tokens: int | None = None) -> list[Variant]:
    """Each variant with its cut in every selected layer (a sharded job's, sent with its
    tasks): calibrated on the dense model's FFN inputs of the first CALIBRATION_TOKENS tokens
    of ``sequences``, as one walk over them calibrates them."""
    if all(v.cuts is not None for v in variants):
        return list(variants)
    cuts = calibration_walk(model, sequences, variants, layers, batch_tokens)
    return [v if v.cuts is not None else
            Variant(v.rule, v.target, {i: cuts.cuts[i, n] for i in layers})
            for n, v in enumerate(variants)]


# ---------------------------------------------------------------------------------------------
# The walk, and what it adds up.


@dataclass
class Part:
    """What the walk over some windows (an encoder: lines) adds up, for the dense model and
    each variant: sums that merge (:func:`merge_parts`), exactly for the counts."""

    nll: Nll
    agreements: list[Agreement]  # decoders: per variant
    cosines: list[Cosines]  # encoders: per variant
    tallies: list[list[Tally]]  # per variant, per selected layer


def merge_parts(a: Part, b: Part) -> Part:
    """a's sums with b's added (a is changed: it is the merge's own)."""
    a.nll.add(b.nll)
    for x, y in zip(a.agreements, b.agreements, strict=True):
        x.add(y)
    for c, d in zip(a.cosines, b.cosines, strict=True):
        c.add(d)
    for ts, us in zip(a.tallies, b.tallies, strict=True):
        for t, u in zip(ts, us, strict=True):
            t.add(u)
    return a


def walk_part(model: Transformer, head: Callable[[], Head | None] | None,
              sequences: Sequence[np.ndarray], firsts: Sequence[int],
              variants: Sequence[Variant], layers: Sequence[int], *,
              calibrated: _Cuts | None = None, batch_tokens: int | None = None,
              progress: Callable[[int], None] | None = None) -> Part:
    """The dense model and every variant over ``sequences`` in one walk: decoders scored by
    their LM head at the positions ``firsts[j]`` .. end-2 of sequence j (``head()`` reads it
    when the walk has left its layers, so that the two are never in memory together);
    encoders (no head) by the cosines of their final hidden states. Cuts not given are those
    ``calibrated`` found or, without, calibrated on variant 0's first FFN inputs of this
    walk."""
    from ffncli.compute.forward.walk import walk_variants

    cuts = calibrated if calibrated is not None else _Cuts(variants)
    sparse: dict[tuple[int, int], SparseFfn] = {}
    selected = set(layers)

    def layer_ffn(i: int, v: int, block: Block) -> Ffn | None:
        for (j, _), done in sparse.items():
            if j < i:
                done.release()  # the walk has left layer j: its weights can go
        if i not in selected:
            return None
        if v == 0:  # the dense FFN, keeping what calibrates while it calibrates
            return cuts.ffn(i, block.engine)
        sparse[i, v] = SparseFfn(block.engine, cuts.cut(i, v - 1, block.engine.d_ff))
        return sparse[i, v]

    part = Part(Nll(), [Agreement() for _ in variants], [Cosines() for _ in variants], [])
    read: list[Head] = []  # the head, once the layers' weights are gone

    def final(bounds: Sequence[tuple[int, int]], first: int, states: list[np.ndarray]) -> None:
        if head is None:
            for v, c in enumerate(part.cosines):
                add_cosines(states[0], states[v + 1], bounds, c)
            return
        rows, nexts = scored_rows(bounds, firsts[first:first + len(bounds)])
        targets = np.concatenate(sequences[first:first + len(bounds)])[nexts]
        if not read:
            for done in sparse.values():
                done.release()  # the last layer's too: the walk has left them all
            lm = head()
            assert lm is not None  # a decoder's
            read.append(lm)
        score(read[0], states[0][rows], targets, part.nll, [s[rows] for s in states[1:]],
              part.agreements)

    walk_variants(model, sequences, 1 + len(variants), layers=layers, ffn=layer_ffn,
                  final=final, batch_tokens=batch_tokens, alike=min(selected, default=0),
                  progress=progress)
    part.tallies = [[sparse[i, v + 1].tally() for i in layers] for v in range(len(variants))]
    return part


def _layer_cost(i: int, t: Tally) -> LayerCost:
    c, d, f, first = t.counts, t.d_model, t.d_ff, t.first
    first_macs, down_macs = t.macs
    n = max(c.tokens, 1)
    s_in: float | None = None
    s_down: float | None = None
    if t.cut.rule == "teal":
        saved = (c.zeroed_in * f * first + c.zeroed * d) / n
        s_in, s_down = c.zeroed_in / (n * d), c.zeroed / (n * f)
        share = saved / (first_macs + down_macs)
    else:
        saved = c.zeroed * d * first / n  # the down column, and the up row of a gated FFN
        share = c.zeroed / (n * f)
    error = float(np.sqrt(c.error2 / c.dense2)) if c.dense2 else 0.0
    return LayerCost(i, t.cut, share, s_in, s_down, error, saved)


def _variant_result(variant: Variant, layers: Sequence[int], tallies: list[Tally],
                    agreement: Agreement | None, cosines: Cosines | None) -> VariantResult:
    costs = [_layer_cost(i, t) for i, t in zip(layers, tallies, strict=True)]
    macs = sum(sum(t.macs) for t in tallies)
    saved = sum(c.macs_saved for c in costs)
    if variant.rule == "teal":
        sparsity = saved / macs if macs else 0.0
    else:
        units = sum(t.counts.tokens * t.d_ff for t in tallies)
        sparsity = sum(t.counts.zeroed for t in tallies) / units if units else 0.0
    kw: dict[str, float | None] = {}
    if agreement is not None:
        kw = {"perplexity": agreement.nll.perplexity, "nll_mean": agreement.nll.mean,
              "kl_mean": agreement.kl_mean, "top1": agreement.top1}
    if cosines is not None:
        kw = {"token_cosine": cosines.token_mean, "sentence_cosine": cosines.sentence_mean,
              "worst_sentence": cosines.worst_sentence}
    return VariantResult(variant.rule, variant.target, variant.label, tuple(costs), sparsity,
                         saved, macs, **kw)


def _check_sparsifiable(model: Transformer, variants: Sequence[Variant],
                        layers: Sequence[int]) -> None:
    if not variants:
        return
    experts = model.spec.ffn.experts
    if experts > 1:
        raise SpecError(f"{model.spec.name}: a mixture of experts ({experts} experts) is not "
                        "sparsified; --sparsify computes dense and gated FFNs")
    for v in variants:
        if v.cuts is not None and set(v.cuts) != set(layers):
            raise InputError(f"{v.label}: its thresholds cut layers {layer_ranges(v.cuts)}, but "
                             f"the layers selected are {layer_ranges(layers)}")


@dataclass(frozen=True)
class Plan:
    """What a perplexity job runs: the windows (an encoder: the lines) and the first position
    each scores, the head, and what calibrates (``calibrate``: sequences walked for it alone;
    None: the evaluated windows themselves, gathered from the dense pass)."""

    model: Transformer
    document: Sequences
    protocol: Protocol | None
    layers: tuple[int, ...]
    variants: tuple[Variant, ...]
    bos: int | None
    calibration: Sequences | None
    decoder: bool  # scored by its LM head (checked, read by the walk when it needs it)
    sequences: tuple[np.ndarray, ...]
    firsts: tuple[int, ...]
    dropped: int
    calibrate: tuple[np.ndarray, ...] | None

    @property
    def calibrating(self) -> tuple[np.ndarray, ...]:
        return self.calibrate if self.calibrate is not None else self.sequences

    def result(self, part: Part) -> PerplexityResult:
        """The job's result from the sums of its walk (or of its shards' walks, merged)."""
        m, doc, decoder = self.model, self.document, self.decoder
        results = tuple(_variant_result(v, self.layers, part.tallies[n],
                                        part.agreements[n] if decoder else None,
                                        part.cosines[n] if not decoder else None)
                        for n, v in enumerate(self.variants))
        calibrated = None
        if _needs_calibration(self.variants):
            where = self.calibration or doc
            calibrated = {"source": where.source, "sha256": where.sha256,
                          "tokens": calibration_rows(sum(len(s) for s in self.calibrating)),
                          "evaluated_text": self.calibration is None}
        return PerplexityResult(
            str(m.weights), doc.source, doc.sha256, "decoder" if decoder else "encoder",
            len(doc.ids[0]) if decoder else doc.tokens, len(self.sequences), self.dropped,
            self.bos, self.protocol, part.nll.tokens,
            part.nll.perplexity if decoder else None, part.nll.mean if decoder else None,
            self.layers, calibrated, results)


def plan(model: Transformer, document: Sequences, protocol: Protocol | None, *,
         variants: Sequence[Variant] = (), layers: Sequence[int] | None = None,
         bos: int | None = None, calibration: Sequences | None = None) -> Plan:
    """The windows ``protocol`` makes of ``document`` (a decoder), or its lines (an encoder,
    ``protocol`` None), and what calibrates the variants: ``calibration``'s chunks, the
    evaluated text's chunks under a stride, else the evaluated windows."""
    layers = tuple(range(model.n_layers)) if layers is None else tuple(layers)
    _check_sparsifiable(model, variants, layers)
    decoder = model.has_head and model.head_tensor() is not None  # checked, not read
    if not decoder and protocol is not None:
        raise InputError(f"{model.weights}: {model.spec.name} is an encoder: it has no LM head "
                         "to predict the next token with; perplexity on it reports the "
                         "fidelity of sparsified hidden states (give no --ctx, --stride or "
                         "--score)")
    if decoder and protocol is None:
        raise ValueError("a decoder is scored under a protocol")
    dropped = 0
    if protocol is not None:
        run = windows(document.ids[0], protocol, bos)
        sequences, firsts, dropped = run.ids, run.first, run.dropped
    else:
        sequences, firsts = tuple(document.ids), ()
    calib = None
    if _needs_calibration(variants) and (calibration is not None or
                                         (protocol is not None and protocol.stride)):
        source = calibration.ids if calibration is not None else document.ids
        calib = tuple(chunks(source[0], protocol.ctx, bos)) if protocol is not None else \
            tuple(source)
        if not calib:
            assert protocol is not None and calibration is not None  # the text has 2 chunks
            raise InputError(f"option --calibration-text: {calibration.source} has "
                             f"{len(source[0]):,} tokens, not one chunk of --ctx "
                             f"{protocol.ctx}: nothing to calibrate on")
    return Plan(model, document, protocol, layers, tuple(variants), bos, calibration, decoder,
                tuple(sequences), tuple(firsts), dropped, calib)


def perplexity(model: Transformer, document: Sequences, protocol: Protocol | None, *,
               variants: Sequence[Variant] = (), layers: Sequence[int] | None = None,
               bos: int | None = None, calibration: Sequences | None = None,
               batch_tokens: int | None = None, progress: Progress | None = None
               ) -> PerplexityResult:
    """The dense model's perplexity on ``document`` under ``protocol`` (decoders), and each
    variant's against it; for an encoder (no LM head, ``protocol`` None), the fidelity of
    each variant's hidden states, ``document`` holding one sequence per line.

    Thresholds are calibrated on the dense model: on ``calibration`` (another text's
    sequences) or, by default, the evaluated text's own first tokens in chunk order."""
    return evaluate(plan(model, document, protocol, variants=variants, layers=layers, bos=bos,
                         calibration=calibration), batch_tokens=batch_tokens, progress=progress)


def evaluate(p: Plan, *, batch_tokens: int | None = None, progress: Progress | None = None
             ) -> PerplexityResult:
    """The plan's walk in this process, calibrated by it."""
    model = p.model
    calibrated = None if p.calibrate is None else \
        calibration_walk(model, p.calibrate, p.variants, p.layers, batch_tokens)
    runs = 1 + len(p.variants)
    if progress is not None:
        progress.start(sum(len(s) for s in p.sequences) * model.n_layers * runs,
                       "tokens x layers", per=model.n_layers * runs)
    part = walk_part(model, model.head if p.decoder else None, p.sequences, p.firsts,
                     p.variants, p.layers, calibrated=calibrated, batch_tokens=batch_tokens,
                     progress=progress.update if progress is not None else None)
    return p.result(part)


# ---------------------------------------------------------------------------------------------
# The command's job: options in, the result out.

DEFAULT_CTX = 512


def _protocol(forward: Transformer, ctx: int | None, stride: int | None, score: str
              ) -> Protocol | None:
    """The protocol of a decoder (``--ctx`` default 512, at most the model's positions);
    None for an encoder, which refuses the protocol's options."""
    from ffncli.analysis.perplexity import check_protocol

    if not forward.has_head:
        given = [name for name, value in (("--ctx", ctx), ("--stride", stride)) if value
                 is not None] + (["--score"] if score != "half" else [])
        if given:
            raise InputError(f"option {given[0]}: {forward.spec.name} is an encoder, with no "
                             "LM head to predict the next token with: it has no perplexity "
                             "protocol (perplexity reports an encoder's embedding fidelity "
                             "under --sparsify)")
        return None
    if ctx is None:
        ctx = DEFAULT_CTX if forward.max_positions is None else min(DEFAULT_CTX,
                                                                    forward.max_positions)
    protocol = Protocol(ctx, stride, score)
    check_protocol(protocol, forward.max_positions)
    return protocol


@dataclass(frozen=True)
class Asked:
    """``perplexity``'s options, one model and text: what :func:`perplexity` (or the sharded
    job) is given, and where ``--save-thresholds`` writes."""

    ctx: int | None = None
    stride: int | None = None
    score: str = "half"
    rule: str | None = None
    targets: tuple[float, ...] = ()
    calibration_text: Path | None = None
    thresholds: Path | None = None
    save: Path | None = None

    def __post_init__(self) -> None:
        check_targets(self.rule, self.targets)  # made checked: the one check of the shares


def plan_job(forward: Transformer, model: ModelChoice, text: TextChoice, asked: Asked
             ) -> Plan:
    """The options checked against the opened model, the text read, the thresholds file read:
    the job's :class:`Plan`."""
    from ffncli.jobs.choices import parse_layers
    from ffncli.jobs.resolve import load_document

    protocol = _protocol(forward, asked.ctx, asked.stride, asked.score)
    layers = parse_layers(model.layer, forward.n_layers)
    variants = [Variant(asked.rule, s) for s in asked.targets] if asked.rule is not None \
        else []
    if asked.thresholds is not None:
        variants = load_thresholds(asked.thresholds, forward)
        cuts = variants[0].cuts or {}
        if model.layer is None:
            layers = tuple(sorted(cuts))
        check_layers(asked.thresholds, cuts, layers, exact=True)
    if protocol is None and not variants:
        raise InputError(f"perplexity: {forward.spec.name} is an encoder, with no LM head: "
                         "it has no perplexity; give --sparsify RULE --target-sparsity S "
                         "(or --thresholds) for the fidelity of its sparsified hidden "
                         "states")
    document, bos = load_document(text.text, text.ids, forward)
    calibration = None
    if asked.calibration_text is not None:
        if not _needs_calibration(variants):
            raise InputError("option --calibration-text: nothing is calibrated (it goes "
                             "with --sparsify cats or teal)")
        calibration, _ = load_document(asked.calibration_text, None, forward)
    return plan(forward, document, protocol, variants=variants, layers=layers, bos=bos,
                calibration=calibration)


def with_thresholds(save: bool, forward: Transformer, result: PerplexityResult
                    ) -> PerplexityResult:
    """``result`` with, when ``save`` (``--save-thresholds``), the document of every
    variant's per-layer cuts and the calibration, made while the model is open: the command
    writes it with ``--report``, both or neither."""
    if not save:
        return result
    return replace(result, thresholds=thresholds_json(
        forward, result.calibration,
        [(v.rule, v.target, {c.layer: c.cut for c in v.layers}) for v in result.variants]))


def run_perplexity(model: ModelChoice, text: TextChoice, *, ctx: int | None = None,
                   stride: int | None = None, score: str = "half", rule: str | None = None,
                   targets: Sequence[float] = (), calibration_text: Path | None = None,
                   thresholds: Path | None = None, save: Path | None = None,
                   bar: Progress | None = None) -> PerplexityResult:
    """``ffncli perplexity``: the model opened once, the text read, the thresholds calibrated
    or read, the walk, and the thresholds' document made (``save``, written by the command)
    when asked."""
    asked = Asked(ctx, stride, score, rule, tuple(targets), calibration_text, thresholds, save)
    return run_asked(model, text, asked, bar=bar)


def run_asked(model: ModelChoice, text: TextChoice, asked: Asked,
              bar: Progress | None = None) -> PerplexityResult:
    """:func:`run_perplexity` of the options already :class:`Asked` (and checked)."""
    from ffncli.jobs.resolve import open_forward
    from ffncli.specs.spec import Overrides

    with open_forward(model, Overrides()) as forward:
        p = plan_job(forward, model, text, asked)
        result = evaluate(p, progress=bar)
        result = with_thresholds(asked.save is not None, forward, result)
    return result
