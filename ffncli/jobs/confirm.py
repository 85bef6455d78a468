"""``ffncli outliers --confirm``: the super-weight candidates zeroed and the massive channels
set to their mean, each beside the same change made at random (the null), scored against the
dense model in one walk of ``perplexity``'s pipeline (:func:`ffncli.jobs.variants.walk_part`);
and where a candidate lives in the checkpoint (its tensor, its index order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import numpy as np

from ffncli.analysis.outliers import (
    is_massive,
)
from ffncli.analysis.perplexity import Protocol, check_protocol
from ffncli.analysis.quantiles import quantile
from ffncli.base.validate import whole
from ffncli.compute.engine import Engine
from ffncli.compute.ffn import (
    MoEWeights,
)
from ffncli.errors import InputError
from ffncli.formats.tensors import GgufTensors
from ffncli.jobs.choices import OPTIONS
from ffncli.jobs.outlier_results import (
    Confirmation,
    ConfirmResult,
    OutliersResult,
    Score,
)
from ffncli.jobs.perplexity import Plan, plan
from ffncli.jobs.progress import Progress
from ffncli.jobs.variants import Change, walk_part
from ffncli.specs.archs import ffn_layout
from ffncli.specs.layouts import GGUF_FFN, GGUF_GATED_FFN, GGUF_MOE_FFN

if TYPE_CHECKING:
    from ffncli.compute.ffn import ExpertWeights, Weights
    from ffncli.compute.forward.layer import Block, Ffn
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences

CONFIRMED = 3  # candidates and massive channels confirmed at most (the largest first)
NULL_POOL = 100  # the null draws from the weights nearest the candidate's |w|
DEFAULT_REPEATS = 5
DEFAULT_CTX = 512  # --confirm's chunks, as perplexity's


# ---------------------------------------------------------------------------------------------
# Where a candidate lives in the checkpoint.


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
        check_protocol(protocol, model.max_positions, OPTIONS)
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
