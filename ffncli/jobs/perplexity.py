"""``ffncli perplexity``: a model's perplexity on a text under a stated protocol, and what
sparsifying its FFNs costs: every target of a rule runs in the same walk as the dense model
(each layer's weights read once for all), calibrated on the dense model's own activations.

Decoders are scored by their LM head (perplexity, KL against dense, top-1 agreement); encoders,
which have none, by the cosine of their final hidden states and of mean-pooled sentence
embeddings, per line of the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.analysis.calibration import calibration_rows
from ffncli.analysis.perplexity import (
    Agreement,
    Cosines,
    Protocol,
    check_protocol,
    chunks,
    windows,
)
from ffncli.base.validate import Words, share
from ffncli.compute.sparse import RULES, Cut, Tally
from ffncli.errors import InputError
from ffncli.jobs.choices import OPTIONS, not_shares, parse_layers
from ffncli.jobs.progress import Progress
from ffncli.jobs.resolve import load_document, open_forward
from ffncli.jobs.thresholds import (
    Variant,
    check_layers,
    layer_ranges,
    load_thresholds,
    thresholds_json,
)
from ffncli.jobs.variants import Part, calibration_walk, needs_calibration, walk_part
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    from pathlib import Path

    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences
    from ffncli.jobs.choices import ModelChoice, TextChoice


# ---------------------------------------------------------------------------------------------
# What is asked.


def check_targets(rule: str | None, targets: Sequence[float], words: Words = OPTIONS) -> None:
    """``--sparsify RULE --target-sparsity S[,S...]``: a rule and its shares, each or neither;
    run once, when :class:`Asked` is made; ``words`` name them (a library call: its
    parameters, ``sparsify`` and ``target_sparsity``)."""
    if rule is None:
        if targets:
            raise InputError(f"{words.where('target_sparsity')} needs "
                             f"{words.given('sparsify', 'cats')}, teal or topk")
        return
    if rule not in RULES:
        raise InputError(f"{words.where('sparsify')}: expected one of {', '.join(RULES)}, got "
                         f"{rule!r}")
    if not targets:
        raise InputError(f"{words.where('sparsify')} needs "
                         f"{words.given('target_sparsity', 'S[,S...]')}, e.g. 0.5")
    for s in targets:
        share(words.where("target_sparsity"), s)


def parse_targets(text: str | None) -> tuple[float, ...]:
    """``--target-sparsity 0.25,0.5``: the shares, in the order given, each once."""
    if text is None:
        return ()
    out: list[float] = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise not_shares(part) from None
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


# ---------------------------------------------------------------------------------------------
# What the job runs: the plan, its walk.


def _check_sparsifiable(variants: Sequence[Variant],
                        layers: Sequence[int]) -> None:
    """Variants from a thresholds file cut the layers selected (a mixture of experts is
    sparsified too: each chosen expert's hidden layer, compute/sparse.py)."""
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
        if needs_calibration(self.variants):
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
         bos: int | None = None, calibration: Sequences | None = None,
         words: Words = OPTIONS) -> Plan:
    """The windows ``protocol`` makes of ``document`` (a decoder), or its lines (an encoder,
    ``protocol`` None), and what calibrates the variants: ``calibration``'s chunks, the
    evaluated text's chunks under a stride, else the evaluated windows. Errors name the
    options in ``words``."""
    layers = tuple(range(model.n_layers)) if layers is None else tuple(layers)
    _check_sparsifiable(variants, layers)
    decoder = _scored_by_head(model, protocol, words)
    dropped = 0
    if protocol is not None:
        run = windows(document.ids[0], protocol, bos, words)
        sequences, firsts, dropped = run.ids, run.first, run.dropped
    else:
        sequences, firsts = tuple(document.ids), ()
    calib = _calibrating(document, protocol, bos, calibration, words) \
        if needs_calibration(variants) else None
    return Plan(model, document, protocol, layers, tuple(variants), bos, calibration, decoder,
                tuple(sequences), tuple(firsts), dropped, calib)


def _scored_by_head(model: Transformer, protocol: Protocol | None, words: Words) -> bool:
    """Whether the model is a decoder, scored by its LM head (checked, not read): then under a
    protocol; an encoder under none."""
    decoder = model.has_head and model.head_tensor() is not None
    if not decoder and protocol is not None:
        raise InputError(f"{model.weights}: {model.spec.name} is an encoder: it has no LM head "
                         "to predict the next token with; perplexity on it reports the "
                         "fidelity of sparsified hidden states (give no "
                         f"{_protocol_names(words)})")
    if decoder and protocol is None:
        raise ValueError("a decoder is scored under a protocol")
    return decoder


def _protocol_names(words: Words) -> str:
    return f"{words.name('ctx')}, {words.name('stride')} or {words.name('score')}"


def _calibrating(document: Sequences, protocol: Protocol | None, bos: int | None,
                 calibration: Sequences | None, words: Words
                 ) -> tuple[np.ndarray, ...] | None:
    """The sequences walked to calibrate alone: ``calibration``'s chunks (an encoder: its
    lines), or the evaluated text's chunks under a stride; None: the evaluated windows."""
    if calibration is None and (protocol is None or not protocol.stride):
        return None
    source = calibration.ids if calibration is not None else document.ids
    if protocol is None:
        return tuple(source)
    calib = tuple(chunks(source[0], protocol.ctx, bos))
    if not calib:
        assert calibration is not None  # the evaluated text has 2 chunks
        raise InputError(f"{words.where('calibration_text')}: {calibration.source} has "
                         f"{len(source[0]):,} tokens, not one chunk of "
                         f"{words.given('ctx', protocol.ctx)}: nothing to calibrate on")
    return calib


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


def _protocol(forward: Transformer, ctx: int | None, stride: int | None, score: str,
              words: Words) -> Protocol | None:
    """The protocol of a decoder (``--ctx`` default 512, at most the model's positions);
    None for an encoder, which refuses the protocol's options."""
    if not forward.has_head:
        given = [name for name, value in (("ctx", ctx), ("stride", stride)) if value
                 is not None] + (["score"] if score != "half" else [])
        if given:
            raise InputError(f"{words.where(given[0])}: {forward.spec.name} is an encoder, "
                             "with no LM head to predict the next token with: it has no "
                             "perplexity protocol (perplexity reports an encoder's embedding "
                             f"fidelity under {words.name('sparsify')})")
        return None
    if ctx is None:
        ctx = DEFAULT_CTX if forward.max_positions is None else min(DEFAULT_CTX,
                                                                    forward.max_positions)
    protocol = Protocol(ctx, stride, score)
    check_protocol(protocol, forward.max_positions, words)
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
    words: Words = OPTIONS  # how errors name these (a library call: its parameters)

    def __post_init__(self) -> None:
        check_targets(self.rule, self.targets, self.words)  # made checked: the one check


def plan_job(forward: Transformer, model: ModelChoice, text: TextChoice, asked: Asked
             ) -> Plan:
    """The options checked against the opened model, the text read, the thresholds file read:
    the job's :class:`Plan`."""
    words = asked.words
    protocol = _protocol(forward, asked.ctx, asked.stride, asked.score, words)
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
        give = f"{words.given('sparsify', 'RULE')}{' ' if words.options else ', '}" \
            f"{words.given('target_sparsity', 'S')}"
        raise InputError(f"perplexity: {forward.spec.name} is an encoder, with no LM head: "
                         f"it has no perplexity; give {give} (or {words.name('thresholds')}) "
                         "for the fidelity of its sparsified hidden states")
    document, bos = load_document(text.text, text.ids, forward, words)
    calibration = None
    if asked.calibration_text is not None:
        if not needs_calibration(variants):
            raise InputError(f"{words.where('calibration_text')}: nothing is calibrated (it "
                             f"goes with {words.given('sparsify', 'cats')} or teal)")
        calibration, _ = load_document(asked.calibration_text, None, forward, words)
    return plan(forward, document, protocol, variants=variants, layers=layers, bos=bos,
                calibration=calibration, words=words)


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
                   bar: Progress | None = None, words: Words = OPTIONS) -> PerplexityResult:
    """``ffncli perplexity``: the model opened once, the text read, the thresholds calibrated
    or read, the walk, and the thresholds' document made (``save``, written by the command)
    when asked; ``words`` name the options in errors (a library call: its parameters)."""
    asked = Asked(ctx, stride, score, rule, tuple(targets), calibration_text, thresholds, save,
                  words)
    return run_asked(model, text, asked, bar=bar)


def run_asked(model: ModelChoice, text: TextChoice, asked: Asked,
              bar: Progress | None = None) -> PerplexityResult:
    """:func:`run_perplexity` of the options already :class:`Asked` (and checked)."""
    with open_forward(model, Overrides(), asked.words) as forward:
        p = plan_job(forward, model, text, asked)
        result = evaluate(p, progress=bar)
        result = with_thresholds(asked.save is not None, forward, result)
    return result
