"""``experts``: where a mixture of experts sends the tokens of a text (the routing profile) and
which experts to keep on a device of a given size (the placement plan).

One walk of the whole model (:func:`ffncli.compute.forward.walk.walk`, as ``capture`` and
``relu-stats --text`` walk it): each selected MoE layer's FFN input, batch by batch, is routed
by the layer's own rule (``ffncli.compute.ffn.route``) and its choices counted in a
:class:`ffncli.analysis.routing.RoutingCounts`; the first choices of two neighbouring MoE
layers in a :class:`ffncli.analysis.routing.LayerTransitions`. Both are sums, so the shards of
a corpus (a glob, a folder, ``--workers``, ``--scheduler``) are profiled one task each and
merged, in the fixed tree of the sharded jobs, into the profile of one walk: the integer
counts equal it exactly, the float sums (router probabilities, entropies) within the float32
forward's rounding (files walked apart are packed in other batches). Any pool gives the same
result to the bit: the tree fixes the order of the additions.

The plan (``--fit``) is arithmetic on the profile and the spec's count
(:mod:`ffncli.counting`): per layer the busiest experts covering ``coverage`` of its routings,
their bytes beside the always-on rest and the KV cache, for every weight dtype.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.analysis.routing import (
    LayerRouting,
    LayerTransitions,
    RoutingCounts,
    transition_baseline,
    transition_entropy,
    transition_hit_rate,
)
from ffncli.base.validate import whole
from ffncli.compute.ffn import MoEWeights, route, scores
from ffncli.compute.forward.walk import walk
from ffncli.counting.fit import Budget
from ffncli.counting.kv import KV_BYTES, kv_cache
from ffncli.counting.model import BITS_PER_PARAM, count
from ffncli.counting.parts import expert_params
from ffncli.errors import FfnError, InputError
from ffncli.jobs.choices import ModelChoice, TextChoice, parse_layers
from ffncli.jobs.progress import Callback, Progress
from ffncli.jobs.shards.inputs import (
    Skipped,
    TextShard,
    every_shard_bad,
    named,
    read_text_shards,
)
from ffncli.jobs.shards.pipeline import map_shards, sorted_skipped
from ffncli.jobs.shards.pool import Pool, TreeMerge
from ffncli.jobs.shards.workers import TextJob, forward_for, release_forwards
from ffncli.specs.spec import FfnSpec, ModelSpec, Overrides

if TYPE_CHECKING:
    from ffncli.compute.forward.layer import Block
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences

DEFAULT_COVERAGE = 0.9  # --coverage: the share of a layer's routings its resident experts take
KV_DTYPE = "bfloat16"  # the plan's KV cache: 16-bit values, as decoding keeps them


# ---------------------------------------------------------------------------------------------
# The rule that chose, and its scores over every expert.


# ---------------------------------------------------------------------------------------------
# The profile: sums, mergeable.


@dataclass
class Profile:
    """The routing counts of a run of tokens: each selected MoE layer's, the transitions of
    each pair of neighbouring ones (layer l -> l + 1), each layer's rule; ``merge`` of two
    runs equals one walk over both."""

    layers: dict[int, RoutingCounts] = field(default_factory=dict)
    transitions: dict[int, LayerTransitions] = field(default_factory=dict)  # by layer l
    rules: dict[int, str] = field(default_factory=dict)
    dense: tuple[int, ...] = ()  # selected layers without experts, left out

    def merge(self, other: Profile) -> Profile:
        """This run's tokens followed by ``other``'s."""
        return Profile({i: c.merge(other.layers[i]) for i, c in self.layers.items()},
                       {i: t.merge(other.transitions[i]) for i, t in self.transitions.items()},
                       self.rules, self.dense)


def merge_profiles(a: Profile | None, b: Profile | None) -> Profile | None:
    """a's tokens followed by b's (None: a shard skipped with --skip-bad)."""
    if a is None or b is None:
        return b if a is None else a
    return a.merge(b)


def moe_layers(spec: ModelSpec, layers: Sequence[int]) -> tuple[int, ...]:
    """The layers of ``layers`` whose FFN, by the spec, is a mixture of experts."""
    return tuple(i for i in layers if layer_ffn(spec, i).is_moe)


def layer_ffn(spec: ModelSpec, i: int) -> FfnSpec:
    """Layer i's FFN as the spec counts it."""
    kinds = spec.decoder_kinds()
    kind = kinds[i] if i < len(kinds) else None
    return kind.ffn if kind is not None and kind.ffn is not None else spec.ffn


def check_moe(model: Transformer, layers: Sequence[int]) -> None:
    """Refuse a model none of whose selected layers routes to experts."""
    if not moe_layers(model.spec, layers):
        which = "its layers" if len(layers) == model.n_layers else \
            f"layer{'s' * (len(layers) > 1)} {_span(layers)}"
        raise InputError(f"experts: {model.weights} has a dense FFN in {which}, no mixture of "
                         "experts: there is no router to profile")


def _span(layers: Sequence[int]) -> str:
    return str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


def profile_walk(model: Transformer, ids: Sequence[np.ndarray], layers: Sequence[int], *,
                 progress: Callback | None = None) -> Profile:
    """One walk over the sequences ``ids``: every selected MoE layer's choices counted."""
    chosen = moe_layers(model.spec, layers)
    out = Profile(dense=tuple(i for i in layers if i not in chosen))
    positions = np.concatenate([np.arange(len(s)) for s in ids])  # each token's place
    state: dict[str, Any] = {"layer": -1, "row": 0, "firsts": None, "previous": None}

    def visit(i: int, block: Block, x: np.ndarray) -> None:
        p = block.engine.weights
        if not isinstance(p, MoEWeights):
            raise InputError(f"experts: layer {i} of {model.weights} holds a dense FFN where "
                             "its config says a mixture of experts")
        if state["layer"] != i:  # a new layer: the last one's first choices kept
            if state["layer"] == i - 1:
                state["previous"] = state["firsts"]
            else:
                state["previous"] = None
            state["layer"], state["row"] = i, 0
            state["firsts"] = np.empty(positions.size, dtype=np.int64)
            out.layers[i] = RoutingCounts(len(p.experts), p.top_k, shared_experts(model.spec, i))
            out.rules[i] = p.describe()
        a = state["row"]
        b = a + x.shape[0]
        order, weights = route(x, p)  # (n, k) each: the layer's own choice
        out.layers[i].update(order, positions[a:b], weights=weights, probs=scores(x, p))
        state["firsts"][a:b] = order[:, 0]
        previous = state["previous"]
        if previous is not None:
            t = out.transitions.get(i - 1)
            if t is None:
                t = out.transitions[i - 1] = LayerTransitions(out.layers[i - 1].experts,
                                                              len(p.experts))
            t.update(previous[a:b, None], order[:, :1])
        state["row"] = b

    walk(model, ids, chosen, visit, progress=progress)
    return out


def shared_experts(spec: ModelSpec, i: int) -> int:
    """Layer i's shared experts (always active, outside the router): the shared width over
    one routed expert's, at least one when there is a shared width."""
    ffn = layer_ffn(spec, i)
    return max(1, ffn.shared_d_ff // ffn.d_ff) if ffn.shared_d_ff else 0


# ---------------------------------------------------------------------------------------------
# The figures of a profile.


@dataclass(frozen=True)
class Transition:
    """From this layer's first choice to the next layer's: the share of tokens whose next
    expert is the one that most often follows theirs, what guessing the next layer's busiest
    expert gets, and the conditional entropy (normalised)."""

    to_layer: int
    hit_rate: float
    baseline: float
    entropy: float


@dataclass(frozen=True)
class ExpertsLayer:
    layer: int
    rule: str
    routing: LayerRouting
    transition: Transition | None  # None: the next layer is not profiled


@dataclass(frozen=True)
class ExpertsResult:
    model: str
    source: str
    tokens: int
    sequences: int
    layers: tuple[ExpertsLayer, ...]
    dense: tuple[int, ...]  # selected layers without experts, left out
    plan: Placement | None = None
    shards: int = 1
    skipped: tuple[Skipped, ...] = ()


def figures(profile: Profile) -> tuple[ExpertsLayer, ...]:
    """Each profiled layer's figures, in layer order."""
    out = []
    for i in sorted(profile.layers):
        t = profile.transitions.get(i)
        move = None if t is None else Transition(
            i + 1, transition_hit_rate(t.counts), transition_baseline(t.counts),
            transition_entropy(t.counts))
        out.append(ExpertsLayer(i, profile.rules[i], profile.layers[i].summary(), move))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# The placement plan: arithmetic on the profile and the spec's count.


@dataclass(frozen=True)
class LayerPlacement:
    """The experts of one layer kept on the device: the busiest first, ``hit_rate`` the share
    of the layer's routings they took on the profiled text."""

    layer: int
    experts: tuple[int, ...]
    of: int
    hit_rate: float
    expert_params: int  # one routed expert's parameters


@dataclass(frozen=True)
class PlanRow:
    """The plan in one weight dtype: the bytes of the always-on rest (attention, shared
    experts, embeddings, norms, routers, and every layer's experts outside the profile), of
    the resident experts, and of the KV cache; whether they fit. When they do not, the largest
    coverage (the same for every layer) whose experts fit, and the hit rate of that set (None:
    the rest and the cache alone do not fit)."""

    dtype: str
    always_on: int
    experts: int
    kv_cache: int
    total: int
    fits: bool
    largest_coverage: float | None
    largest_hit_rate: float | None


@dataclass(frozen=True)
class Placement:
    budget: str
    usable: int
    reserve: int
    coverage: float
    seq_len: int
    kv_dtype: str
    params: int  # the whole model's, as the spec counts them
    always_on_params: int
    resident_params: int
    layers: tuple[LayerPlacement, ...]
    hit_rate: float  # of every profiled layer's routings, on the resident experts
    rows: tuple[PlanRow, ...]


def check_coverage(coverage: float) -> Fraction:
    """--coverage, in (0, 1], as the exact decimal typed."""
    if not (isinstance(coverage, float | int) and math.isfinite(coverage)
            and 0 < coverage <= 1):
        raise InputError(f"option --coverage: expected a share of routings above 0 and at most "
                         f"1, such as 0.9, got {coverage}")
    return Fraction(repr(float(coverage)))


def covering(load: Sequence[int], share: Fraction) -> tuple[int, ...]:
    """The fewest experts whose routings reach ``share`` of the layer's: the busiest first
    (ties: the lower index), exact in whole numbers."""
    loads = np.asarray(load, dtype=np.int64)
    order = np.argsort(-loads, kind="stable")
    need = share * int(loads.sum())
    total = 0
    for m, e in enumerate(order):
        if total >= need:
            return tuple(int(x) for x in order[:m])
        total += int(loads[e])
    return tuple(int(x) for x in order)


def _bytes(params: int, dtype: str) -> int:
    return (params * BITS_PER_PARAM[dtype] + 7) // 8


def plan(spec: ModelSpec, layers: Sequence[ExpertsLayer], budget: Budget, coverage: float,
         seq_len: int | None = None) -> Placement:
    """The placement plan of a profile: per profiled layer the busiest experts covering
    ``coverage`` of its routings; every other parameter of the model (its count by the spec)
    always on the device, with the KV cache of one sequence of ``seq_len`` (default the
    spec's) in 16-bit values."""
    share = check_coverage(coverage)
    seq_len = spec.seq_len if seq_len is None else seq_len
    whole("option --seq-len", seq_len)
    total = count(spec).total
    per = {x.layer: layer_ffn(spec, x.layer).stack * expert_params(spec.d_model,
                                                                    layer_ffn(spec, x.layer))
           for x in layers}
    routed = sum(per[x.layer] * x.routing.experts for x in layers)
    always = total - routed
    kv = kv_cache(spec, seq_len, 1).elements(seq_len) * KV_BYTES[KV_DTYPE]
    chosen = [_place(x, covering(x.routing.load, share), per[x.layer]) for x in layers]
    resident = sum(len(c.experts) * c.expert_params for c in chosen)
    rows = []
    for dtype in BITS_PER_PARAM:
        on, experts = _bytes(always, dtype), _bytes(resident, dtype)
        fits = on + experts + kv <= budget.usable
        largest = None if fits else _largest(layers, per, budget.usable - on - kv, dtype)
        rows.append(PlanRow(dtype, on, experts, kv, on + experts + kv, fits,
                            None if largest is None else largest[0],
                            None if largest is None else largest[1]))
    return Placement(budget.text, budget.usable, budget.reserve, float(coverage), seq_len,
                     KV_DTYPE, total, always, resident, tuple(chosen),
                     _hit_rate(layers, [c.experts for c in chosen]), tuple(rows))


def _place(x: ExpertsLayer, experts: tuple[int, ...], params: int) -> LayerPlacement:
    taken = sum(x.routing.load[e] for e in experts)
    return LayerPlacement(x.layer, experts, x.routing.experts, taken / sum(x.routing.load),
                          params)


def _hit_rate(layers: Sequence[ExpertsLayer], sets: Sequence[Sequence[int]]) -> float:
    """The share of every layer's routings that land on its resident experts."""
    taken = sum(sum(x.routing.load[e] for e in s) for x, s in zip(layers, sets, strict=True))
    return taken / sum(sum(x.routing.load) for x in layers)


def _largest(layers: Sequence[ExpertsLayer], per: dict[int, int], free: int, dtype: str
             ) -> tuple[float, float] | None:
    """The largest coverage c, the same for every layer, whose experts (each layer's fewest
    covering c of its routings) fit in ``free`` bytes, and their hit rate; None when not even
    none fit. The candidates: every share some layer's busiest m experts reach."""
    if free < 0:
        return None
    candidates = {Fraction(0)}
    for x in layers:
        cum = np.cumsum(np.sort(np.asarray(x.routing.load))[::-1])
        candidates.update(Fraction(int(c), int(cum[-1])) for c in cum)
    best: tuple[float, float] = (0.0, 0.0)
    for c in sorted(candidates):
        sets = [covering(x.routing.load, c) for x in layers]
        params = sum(len(s) * per[x.layer] for x, s in zip(layers, sets, strict=True))
        if _bytes(params, dtype) > free:
            break
        best = (float(c), _hit_rate(layers, sets))
    return best


# ---------------------------------------------------------------------------------------------
# The jobs: one process, or shards on a pool.


@dataclass(frozen=True)
class Asked:
    """What the command asks beyond the profile: ``--fit``/``--reserve`` as a budget, the
    coverage and the KV cache's length."""

    budget: Budget | None = None
    coverage: float = DEFAULT_COVERAGE
    seq_len: int | None = None

    @staticmethod
    def of(budget: Budget | None, coverage: float | None, seq_len: int | None) -> Asked:
        """The options as given: ``--coverage`` and ``--seq-len`` shape the plan, so they
        need ``--fit``."""
        given = [name for name, value in (("--coverage", coverage), ("--seq-len", seq_len))
                 if value is not None]
        if given and budget is None:
            raise InputError(f"{' and '.join(given)} shape{'s' * (len(given) == 1)} the "
                             "placement plan: give --fit too")
        return Asked(budget, DEFAULT_COVERAGE if coverage is None else coverage, seq_len)

    def check(self, model: ModelChoice) -> None:
        check_coverage(self.coverage)
        if self.seq_len is not None:
            whole("option --seq-len", self.seq_len)
        if self.budget is not None and model.layer not in (None, "all"):
            raise InputError("option --fit plans every layer's experts: leave --layer out")


def experts(model: Transformer, sequences: Sequences, layers: Sequence[int],
            asked: Asked = Asked(), *, progress: Callback | None = None) -> ExpertsResult:
    """``experts`` of one text in this process: the profile of one walk and, asked, its plan."""
    check_moe(model, layers)
    profile = profile_walk(model, sequences.ids, layers, progress=progress)
    return _result(model, profile, sequences.source, sequences.tokens, len(sequences.ids),
                   asked)


def _result(model: Transformer, profile: Profile, source: str, tokens: int, sequences: int,
            asked: Asked, shards: int = 1, skipped: Sequence[Skipped] = ()) -> ExpertsResult:
    found = figures(profile)
    placed = None if asked.budget is None else plan(model.spec, found, asked.budget,
                                                     asked.coverage, asked.seq_len)
    return ExpertsResult(str(model.weights), source, tokens, sequences, found, profile.dense,
                         placed, shards, tuple(skipped))


@dataclass(frozen=True)
class ExpertsTask:
    job: TextJob
    layers: tuple[int, ...]


def shard_profile(task: ExpertsTask, shard: TextShard) -> Profile:
    """One shard through the whole model: its routing counts."""
    try:
        return profile_walk(forward_for(task.job), shard.ids, task.layers)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None


def experts_shards(model: ModelChoice, text: TextChoice, pool: Pool, asked: Asked = Asked(),
                   *, skip_bad: bool = False, progress: Progress | None = None
                   ) -> ExpertsResult:
    """``experts`` over the shards of --text/--ids (a glob, a folder, a cluster): a task per
    shard, the profiles merged in the fixed tree."""
    job = TextJob(model, Overrides())
    with contextlib.ExitStack() as done:
        done.callback(release_forwards)  # the forward the client opens here is the job's
        forward = forward_for(job)
        layers = parse_layers(model.layer, forward.n_layers)
        check_moe(forward.model, layers)
        shards, skipped = read_text_shards(text, forward, skip_bad)
        tree = TreeMerge(len(shards), merge_profiles)
        counted: list[int] = []
        calls = [(ExpertsTask(job, layers), s) for s in shards]
        for i, out in map_shards(pool, shard_profile, calls, shards, skip_bad=skip_bad,
                                 skipped=skipped, progress=progress or Progress()):
            if out is not None:
                counted.append(i)
            tree.add(i, out)
        profile: Profile | None = tree.root
        if profile is None:
            raise every_shard_bad("--text" if text.text is not None else "--ids", skipped)
        source = str(text.text if text.text is not None else text.ids)
        return _result(forward.model, profile, source, sum(shards[i].tokens for i in counted),
                       sum(len(shards[i].ids) for i in counted), asked, len(shards),
                       sorted_skipped(skipped))

