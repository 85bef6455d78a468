"""``ffncli perplexity``: a model's perplexity on a text under a stated protocol, and what
sparsifying its FFNs costs: every target of a rule runs in the same walk as the dense model
(each layer's weights read once for all), calibrated on the dense model's own activations.

Decoders are scored by their LM head (perplexity, KL against dense, top-1 agreement); encoders,
which have none, by the cosine of their final hidden states and of mean-pooled sentence
embeddings, per line of the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ffncli.analysis.perplexity import (
    Agreement,
    Cosines,
    Nll,
    Protocol,
    Windows,
    add_cosines,
    chunks,
    score,
    scored_rows,
    windows,
)
from ffncli.analysis.sparsity import CALIBRATION_TOKENS, calibrate_cuts
from ffncli.compute.sparse import RULES, Cut, SparseFfn
from ffncli.errors import InputError, SpecError
from ffncli.jobs.progress import Progress
from ffncli.jobs.thresholds import (
    Variant,
    check_layers,
    layer_ranges,
    load_thresholds,
    save_thresholds,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.families import Transformer
    from ffncli.compute.forward.layer import Block, Ffn
    from ffncli.formats.text import Sequences
    from ffncli.jobs.choices import ModelChoice, TextChoice


# ---------------------------------------------------------------------------------------------
# What is asked.


def check_targets(rule: str | None, targets: Sequence[float]) -> None:
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
        if not 0 <= s < 1:
            raise InputError(f"option --target-sparsity: expected shares from 0 to below 1, "
                             f"got {s:g}")


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
        if value != value:
            raise InputError("option --target-sparsity: expected shares from 0 to below 1, "
                             "got nan")
        value += 0.0  # -0 is 0
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


# ---------------------------------------------------------------------------------------------
# The walk.


class _Cuts:
    """Each variant's cut in each selected layer, from a file, from the rule alone (topk), or
    calibrated on the dense model's first CALIBRATION_TOKENS FFN inputs of the layer: held
    (``samples``, from a calibration walk) or gathered from variant 0 of this walk."""

    def __init__(self, variants: Sequence[Variant], samples: dict[int, np.ndarray] | None
                 ) -> None:
        self.variants, self.samples = variants, samples
        self.gathered: dict[int, list[np.ndarray]] = {}
        self.cuts: dict[tuple[int, int], Cut] = {}
        # from variant 0 of this walk: no calibration walk, and some variant to calibrate
        self.gathering = samples is None and any(v.cuts is None and v.rule != "topk"
                                                 for v in variants)

    def gather(self, i: int, x: np.ndarray) -> None:
        parts = self.gathered.setdefault(i, [])
        have = sum(len(p) for p in parts)
        if have < CALIBRATION_TOKENS:
            parts.append(np.array(x[:CALIBRATION_TOKENS - have]))

    def cut(self, i: int, v: int, engine: Engine) -> Cut:
        """Variant v's cut in layer i: the first call of a layer calibrates every variant's."""
        if (i, v) not in self.cuts:
            calibrated = [(n, w) for n, w in enumerate(self.variants) if w.cuts is None]
            if calibrated:
                sample = self.samples[i] if self.samples is not None else \
                    np.concatenate(self.gathered.get(i) or [np.empty((0, engine.d_model))])
                cuts = calibrate_cuts(engine, sample.astype(engine.dtype),
                                      [(w.rule, w.target) for _, w in calibrated])
                self.cuts |= {(i, n): c for (n, _), c in zip(calibrated, cuts, strict=True)}
            self.cuts |= {(i, n): w.cuts[i] for n, w in enumerate(self.variants)
                          if w.cuts is not None}
            self.gathered.pop(i, None)  # every variant of the layer has its cut
        return self.cuts[i, v]


def calibration_samples(model: Transformer, sequences: Sequence[np.ndarray],
                        layers: Sequence[int], batch_tokens: int | None = None
                        ) -> dict[int, np.ndarray]:
    """The dense model's FFN inputs of the first CALIBRATION_TOKENS tokens of ``sequences``
    (in order), per selected layer: a walk of those tokens only."""
    from ffncli.compute.forward.walk import walk

    first, have = [], 0
    for s in sequences:
        if have >= CALIBRATION_TOKENS:
            break
        first.append(s)
        have += len(s)
    cuts = _Cuts([], None)
    walk(model, first, layers, lambda i, block, x: cuts.gather(i, x),
         batch_tokens=batch_tokens)
    return {i: np.concatenate(cuts.gathered[i]) for i in layers}


def _layer_cost(i: int, ffn: SparseFfn) -> LayerCost:
    c, d, f, first = ffn.counts, ffn.d_model, ffn.d_ff, ffn.first
    first_macs, down_macs = ffn.macs
    n = max(c.tokens, 1)
    s_in: float | None = None
    s_down: float | None = None
    if ffn.cut.rule == "teal":
        saved = (c.zeroed_in * f * first + c.zeroed * d) / n
        s_in, s_down = c.zeroed_in / (n * d), c.zeroed / (n * f)
        share = saved / (first_macs + down_macs)
    else:
        saved = c.zeroed * d * first / n  # the down column, and the up row of a gated FFN
        share = c.zeroed / (n * f)
    error = float(np.sqrt(c.error2 / c.dense2)) if c.dense2 else 0.0
    return LayerCost(i, ffn.cut, share, s_in, s_down, error, saved)


def _variant_result(variant: Variant, costs: list[LayerCost], ffns: list[SparseFfn],
                    agreement: Agreement | None, cosines: Cosines | None) -> VariantResult:
    macs = sum(sum(f.macs) for f in ffns)
    saved = sum(c.macs_saved for c in costs)
    if variant.rule == "teal":
        sparsity = saved / macs if macs else 0.0
    else:
        units = sum(f.counts.tokens * f.d_ff for f in ffns)
        sparsity = sum(f.counts.zeroed for f in ffns) / units if units else 0.0
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
    from ffncli.compute.forward.walk import walk_variants

    layers = tuple(range(model.n_layers)) if layers is None else tuple(layers)
    _check_sparsifiable(model, variants, layers)
    head = model.head() if model.has_head else None
    if head is None and protocol is not None:
        raise InputError(f"{model.weights}: {model.spec.name} is an encoder: it has no LM head "
                         "to predict the next token with; perplexity on it reports the "
                         "fidelity of sparsified hidden states (give no --ctx, --stride or "
                         "--score)")
    if head is not None and protocol is None:
        raise ValueError("a decoder is scored under a protocol")
    ids = document.ids[0] if protocol is not None else np.empty(0, dtype=np.int64)
    if protocol is not None:
        run: Windows = windows(ids, protocol, bos)
        sequences, firsts = list(run.ids), list(run.first)
    else:
        sequences, firsts = list(document.ids), []
    samples = None
    needs = any(v.cuts is None and v.rule != "topk" for v in variants)
    calib = sequences  # what calibrates: the evaluated chunks, or another text's
    if needs and (calibration is not None or (protocol is not None and protocol.stride)):
        source = calibration.ids if calibration is not None else document.ids
        calib = chunks(source[0], protocol.ctx, bos) if protocol is not None else \
            list(source)
        if not calib:
            assert protocol is not None and calibration is not None  # the text has 2 chunks
            raise InputError(f"option --calibration-text: {calibration.source} has "
                             f"{len(source[0]):,} tokens, not one chunk of --ctx "
                             f"{protocol.ctx}: nothing to calibrate on")
        samples = calibration_samples(model, calib, layers, batch_tokens)
    cuts = _Cuts(variants, samples)
    sparse: dict[tuple[int, int], SparseFfn] = {}
    selected = set(layers)

    def layer_ffn(i: int, v: int, block: Block) -> Ffn | None:
        for (j, _), done in sparse.items():
            if j < i:
                done.release()  # the walk has left layer j: its weights can go
        if v == 0 or i not in selected:
            return None
        sparse[i, v] = SparseFfn(block.engine, cuts.cut(i, v - 1, block.engine))
        return sparse[i, v]

    def visit(i: int, v: int, block: Block, x: np.ndarray) -> None:
        if v == 0 and cuts.gathering:
            cuts.gather(i, x)

    nll = Nll()
    agreements = [Agreement() for _ in variants]
    cosines = [Cosines() for _ in variants]

    def final(bounds: Sequence[tuple[int, int]], first: int, states: list[np.ndarray]) -> None:
        if head is None:
            for v, c in enumerate(cosines):
                add_cosines(states[0], states[v + 1], bounds, c)
            return
        rows, nexts = scored_rows(bounds, firsts[first:first + len(bounds)])
        targets = np.concatenate(sequences[first:first + len(bounds)])[nexts]
        score(head, states[0][rows], targets, nll, [s[rows] for s in states[1:]],
              agreements)

    runs = 1 + len(variants)
    if progress is not None:
        progress.start(sum(len(s) for s in sequences) * model.n_layers * runs,
                       "tokens x layers", per=model.n_layers * runs)
    walk_variants(model, sequences, runs, visit, layers=layers, ffn=layer_ffn, final=final,
                  batch_tokens=batch_tokens,
                  progress=progress.update if progress is not None else None)
    results = []
    for v, variant in enumerate(variants):
        ffns = [sparse[i, v + 1] for i in layers]
        costs = [_layer_cost(i, f) for i, f in zip(layers, ffns, strict=True)]
        results.append(_variant_result(variant, costs, ffns,
                                       agreements[v] if head is not None else None,
                                       cosines[v] if head is None else None))
    calibrated = None
    if needs:
        where = calibration or document
        calibrated = {"source": where.source, "sha256": where.sha256,
                      "tokens": min(CALIBRATION_TOKENS, sum(len(s) for s in calib)),
                      "evaluated_text": calibration is None}
    tokens = len(ids) if protocol is not None else document.tokens
    return PerplexityResult(
        str(model.weights), document.source, document.sha256,
        "decoder" if head is not None else "encoder", tokens, len(sequences),
        run.dropped if protocol is not None else 0, bos, protocol,
        nll.tokens, nll.perplexity if head is not None else None,
        nll.mean if head is not None else None, layers, calibrated, tuple(results))


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


def run_perplexity(model: ModelChoice, text: TextChoice, *, ctx: int | None = None,
                   stride: int | None = None, score: str = "half", rule: str | None = None,
                   targets: Sequence[float] = (), calibration_text: Path | None = None,
                   thresholds: Path | None = None, save: Path | None = None,
                   bar: Progress | None = None) -> PerplexityResult:
    """``ffncli perplexity``: the model opened once, the text read, the thresholds calibrated
    or read, the walk, and the thresholds saved (``save``) when asked."""
    from ffncli.jobs.choices import parse_layers
    from ffncli.jobs.resolve import load_document, open_forward
    from ffncli.specs.spec import Overrides

    check_targets(rule, targets)
    with open_forward(model, Overrides()) as forward:
        protocol = _protocol(forward, ctx, stride, score)
        layers = parse_layers(model.layer, forward.n_layers)
        variants = [Variant(rule, s) for s in targets] if rule is not None else []
        if thresholds is not None:
            variants = load_thresholds(thresholds, forward)
            cuts = variants[0].cuts or {}
            if model.layer is None:
                layers = tuple(sorted(cuts))
            check_layers(thresholds, cuts, layers, exact=True)
        if protocol is None and not variants:
            raise InputError(f"perplexity: {forward.spec.name} is an encoder, with no LM head: "
                             "it has no perplexity; give --sparsify RULE --target-sparsity S "
                             "(or --thresholds) for the fidelity of its sparsified hidden "
                             "states")
        document, bos = load_document(text.text, text.ids, forward)
        calibration = None
        if calibration_text is not None:
            if not variants or all(v.rule == "topk" or v.cuts is not None for v in variants):
                raise InputError("option --calibration-text: nothing is calibrated (it goes "
                                 "with --sparsify cats or teal)")
            calibration, _ = load_document(calibration_text, None, forward)
        result = perplexity(forward, document, protocol, variants=variants, layers=layers,
                            bos=bos, calibration=calibration, progress=bar)
        if save is not None:
            save_thresholds(save, forward, result.calibration,
                            [(v.rule, v.target, {c.layer: c.cut for c in v.layers})
                             for v in result.variants])
    return result
