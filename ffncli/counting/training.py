"""Fine-tuning memory: a plan's weights, gradients, fp32 master weights, optimizer states and
activations in bytes, each with the FFN's part. Pure integer arithmetic; no NumPy here.

Exact where storage is a convention of a named library (docs/commands/params.md names each):
- weights, gradients and master weights by precision, as DeepSpeed/Megatron's mixed precision
  (Rajbhandari et al. 2020, "ZeRO": 16-bit weights and gradients, an fp32 master copy);
- optimizer states as PyTorch 2.13's own optimizers store them (a float32 ``step`` tensor per
  parameter tensor for Adam, AdamW and Adafactor; Adafactor's factored row and column
  variances); 8-bit AdamW and QLoRA's NF4 as bitsandbytes 0.50 stores them;
- LoRA's adapters as peft counts them: r x (n_in + n_out) per adapted matrix, in float32
  (peft's ``autocast_adapter_dtype``), every expert's matrices apart.
Activations are an estimate: Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models"), extended to gated FFNs and grouped-query attention term by term.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ffncli.base.validate import suggest, whole
from ffncli.counting.model import count
from ffncli.counting.parts import attention_widths
from ffncli.counting.tensors import HEAD, Tensor, tensors, unitemised
from ffncli.errors import InputError, SpecError
from ffncli.specs.spec import FfnSpec, ModelSpec

MODES = ("full", "lora", "qlora")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit")
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16")
TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "router")
TARGET_SETS = {"attention": ("q", "k", "v", "o"), "ffn": ("gate", "up", "down"),
               "all-linear": ()}  # all-linear: every linear layer but the output head
# A matrix stored for several targets is adapted when all of them are asked for.
FUSED = {"qkv": ("q", "k", "v"), "kv": ("k", "v"), "gate_up": ("gate", "up")}

FP32, HALF = 4, 2
STEP_BYTES = 4  # PyTorch's ``step``: a float32 scalar tensor per parameter tensor
# bitsandbytes 0.50: 8-bit optimizer states in blocks of 256 with a float32 absmax each, for
# tensors of at least 4,096 elements (smaller ones keep 32-bit states); one shared 256-entry
# float32 quantisation map per state.
BNB_BLOCK, BNB_MIN_8BIT, BNB_QMAP = 256, 4096, 256 * FP32
# NF4 (QLoRA): 4 bits a weight, one absmax per 64 weights, the absmaxes quantised to 8 bits in
# blocks of 256 with a float32 scale each and one float32 offset (double quantisation), and the
# matrix's two code tables (NF4's 16 values, the nested 256-entry map), float32.
NF4_BLOCK, NF4_NESTED_BLOCK, NF4_CODES = 64, 256, (16 + 256) * FP32


# How a plan's errors name its fields: a library call's parameters (ffncli.training_plan);
# params --train passes its options (ffncli.jobs.choices.TRAIN_OPTIONS).
PLAN_PARAMETERS = {"mode": "mode", "optimizer": "optimizer", "precision": "precision",
                   "lora_rank": "lora_rank", "lora_targets": "lora_targets",
                   "seq_len": "seq_len", "batch": "batch"}


@dataclass(frozen=True)
class Plan:
    """``params --train``: what is trained, how, and on what batch."""

    mode: str = "full"
    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ("all-linear",)
    seq_len: int = 1024
    batch: int = 1
    flash_attention: bool = False
    recompute: bool = False  # full activation recomputation: keep each layer's input only
    dropout: bool = True  # the paper's dropout masks and outputs

    def check(self, names: Mapping[str, str] = PLAN_PARAMETERS) -> Plan:
        """The plan, every field checked; errors name each as ``names`` says."""
        for field, choices in (("mode", MODES), ("optimizer", OPTIMIZERS),
                               ("precision", PRECISIONS)):
            value = getattr(self, field)
            if value not in choices:
                raise InputError(f"{names[field]}: expected one of {', '.join(choices)}, got "
                                 f"'{value}'{suggest(str(value), choices)}")
        for field in ("lora_rank", "seq_len", "batch"):
            whole(names[field], getattr(self, field))
        for name in self.lora_targets:
            if name not in TARGETS and name not in TARGET_SETS:
                known = (*TARGETS, *TARGET_SETS)
                raise InputError(f"{names['lora_targets']}: unknown target '{name}'"
                                 f"{suggest(name, known)}; expected a comma-separated list "
                                 f"of {', '.join(known)}")
        if not self.lora_targets:
            raise InputError(f"{names['lora_targets']}: expected at least one target")
        return self

    @property
    def lora(self) -> bool:
        return self.mode != "full"


@dataclass(frozen=True)
class Share:
    """A figure and the part of it that is the FFN's (its matrices, router and experts)."""

    total: int
    ffn: int

    def __add__(self, other: Share) -> Share:
        return Share(self.total + other.total, self.ffn + other.ffn)

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 0.0


ZERO = Share(0, 0)


def _sum(pairs: Iterable[tuple[Tensor, int]]) -> Share:
    """Bytes (or parameters) per tensor kind, summed, with the FFN's part."""
    total = ffn = 0
    for tensor, each in pairs:
        total += tensor.count * each
        ffn += tensor.count * each if tensor.part == "ffn" else 0
    return Share(total, ffn)


@dataclass(frozen=True)
class Adapter:
    """LoRA on ``count`` matrices of one shape: A (r x n_in) and B (n_out x r) each."""

    matrix: Tensor
    rank: int

    @property
    def params(self) -> int:
        """r x (n_in + n_out), peft's count of one adapted matrix."""
        n_out, n_in = self.matrix.shape
        return self.rank * (n_in + n_out)

    def tensors(self) -> tuple[Tensor, Tensor]:
        n_out, n_in = self.matrix.shape
        m = self.matrix
        return (Tensor(m.part, (self.rank, n_in), m.count, m.target, m.kind),
                Tensor(m.part, (n_out, self.rank), m.count, m.target, m.kind))


def wanted_targets(spec: ModelSpec, names: Sequence[str], where: str = "lora_targets"
                   ) -> frozenset[str]:
    """The targets (as :mod:`ffncli.counting.tensors` names them) that ``--lora-targets``
    adapts in this spec; refused where one names nothing in it or half of a fused matrix
    (errors begin with ``where``)."""
    present = {t.target for t in tensors(spec) if t.linear}
    if "all-linear" in names:
        return frozenset(present - {HEAD})
    asked = _asked(names, present)
    chosen = {t for t in asked if t in present} | _fused(spec, asked, present, where)
    missing = sorted(t for t in asked if t not in chosen and not _in_fused(t, chosen))
    if missing:
        raise InputError(f"{where}: {spec.name} has no {', '.join(missing)} "
                         f"projection ({_why_missing(spec, missing)})")
    return frozenset(chosen)


def _in_fused(target: str, matrices: Iterable[str]) -> bool:
    """Whether ``target`` is stored inside one of the fused ``matrices``."""
    return any(m in FUSED and target in FUSED[m] for m in matrices)


def _asked(names: Sequence[str], present: set[str]) -> set[str]:
    """The targets ``names`` asks for: each named one, and what the spec has of each set
    (ffn: no gate when ungated)."""
    asked = {name for name in names if name not in TARGET_SETS}
    for name in names:
        asked.update(t for t in TARGET_SETS.get(name, ()) if t in present
                     or _in_fused(t, present))
    return asked


def _fused(spec: ModelSpec, asked: set[str], present: set[str], where: str) -> set[str]:
    """The fused matrices of the spec whose every part is asked for; half of one is
    refused."""
    chosen = set()
    for matrix, parts in FUSED.items():
        given = [p for p in parts if p in asked]
        if matrix not in present or not given:
            continue
        if len(given) < len(parts):
            raise InputError(f"{where}: {spec.family} stores {', '.join(parts)} "
                             f"as one matrix ({matrix}); adapt them together, not "
                             f"{', '.join(given)} alone")
        chosen.add(matrix)
    return chosen


def _why_missing(spec: ModelSpec, missing: Sequence[str]) -> str:
    if "router" in missing and not spec.ffn.is_moe:
        return "not a mixture of experts"
    if "gate" in missing and not spec.ffn.gated:
        return "its FFN is not gated: it has up and down projections"
    if spec.attention is None:
        return "no attention"
    return "not a projection of its layers"


def adapters(spec: ModelSpec, plan: Plan, names: Mapping[str, str] = PLAN_PARAMETERS
             ) -> tuple[Adapter, ...]:
    """One adapter a matrix kind that ``plan.lora_targets`` names (none for full training)."""
    if not plan.lora:
        return ()
    chosen = wanted_targets(spec, plan.lora_targets, names["lora_targets"])
    return tuple(Adapter(t, plan.lora_rank) for t in tensors(spec)
                 if t.linear and t.target in chosen)


# ---------------------------------------------------------------------------------------------
# Bytes of each kind of state.


def nf4_bytes(numel: int) -> int:
    """A matrix in QLoRA's NF4 with double quantisation: packed 4-bit weights, an 8-bit absmax
    per block of 64, a float32 scale per 256 absmaxes, one float32 offset and the two code
    tables (as bitsandbytes 0.50's ``Params4bit`` holds them)."""
    blocks = -(-numel // NF4_BLOCK)
    return (-(-numel // 2) + blocks + FP32 * -(-blocks // NF4_NESTED_BLOCK) + FP32
            + NF4_CODES)


def optimizer_bytes(optimizer: str, tensor: Tensor, state: int) -> int:
    """What ``optimizer`` keeps for one tensor whose states are ``state`` bytes an element."""
    n = tensor.numel
    if optimizer in ("adam", "adamw"):
        return 2 * n * state + STEP_BYTES
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd-momentum":
        return n * state
    if optimizer == "adafactor":  # torch.optim.Adafactor: row and column variances
        if len(tensor.shape) >= 2:
            rows, cols = tensor.shape[-2:]
            return n // (rows * cols) * (rows + cols) * state + STEP_BYTES
        return n * state + STEP_BYTES
    if n < BNB_MIN_8BIT:  # adamw-8bit: small tensors keep two float32 states
        return 2 * n * FP32
    return 2 * (n + FP32 * -(-n // BNB_BLOCK))


def _shared_optimizer_bytes(optimizer: str, trained: Sequence[Tensor]) -> int:
    """State shared by every tensor: 8-bit AdamW's two quantisation maps, once."""
    if optimizer == "adamw-8bit" and any(t.numel >= BNB_MIN_8BIT for t in trained):
        return 2 * BNB_QMAP
    return 0


@dataclass(frozen=True)
class Dtypes:
    """Bytes an element, by precision: trained weights, their gradients, the fp32 master copy
    (mixed precision only), optimizer states, frozen weights and activations."""

    weight: int
    grad: int
    master: int
    state: int
    frozen: int
    activation: int


def dtypes(precision: str, lora: bool) -> Dtypes:
    """Under ``fp32`` everything is 4 bytes; ``bf16-mixed``/``fp16-mixed`` keep 16-bit weights
    and gradients, an fp32 master copy and fp32 states; pure ``bf16`` keeps everything in
    16 bits. LoRA's adapters are float32 in every precision (peft casts them), so they have
    no master copy."""
    half = precision != "fp32"
    mixed = precision.endswith("-mixed")
    frozen = activation = HALF if half else FP32
    if lora:
        return Dtypes(FP32, FP32, 0, FP32, frozen, activation)
    weight = HALF if half else FP32
    return Dtypes(weight, weight, FP32 if mixed else 0, FP32 if mixed or not half else HALF,
                  frozen, activation)


# ---------------------------------------------------------------------------------------------
# Activations (an estimate): Korthikanti et al. 2022, bytes per layer.


@dataclass(frozen=True)
class Activations:
    """Per layer kind, bytes one layer keeps for the backward pass at seq_len x batch; the
    head's (final norm, its input, float32 logits); the total with and without full
    recomputation."""

    per_layer: tuple[tuple[str, int, Share], ...]  # (layer kind, layers, one layer's bytes)
    outside: int
    stored: Share  # every layer's activations, kept
    recomputed: Share  # each layer's input kept, one layer's activations rebuilt at a time


def attention_bytes(spec: ModelSpec, plan: Plan, e: int) -> int:
    """One attention block: its norm's and QKV's input, Q and K (for the scores), V, the
    output projection's input, and the scores: the softmax output (and with dropout its mask
    and output), a^s^2 b each; or with flash attention a float32 log-sum-exp per head and
    token instead. With all heads of MHA (h_q = h_kv = h) this is the paper's
    11 s b h + 5 a s^2 b (plus 2 s b h for the norm)."""
    att = spec.attention
    if att is None:
        return 0
    s, b, h = plan.seq_len, plan.batch, spec.d_model
    q_width, kv_width = attention_widths(h, att)
    if att.kv_lora_rank:  # latent attention: keys and values as wide as the expanded heads
        q_width = att.heads * (att.head_dim or 0)
        kv_width = att.heads * (att.v_head_dim or att.head_dim or 0)
    mask = 1 if plan.dropout else 0
    sb = s * b
    tokens = e * sb * h + e * sb * h + e * sb * (q_width + kv_width) + e * sb * kv_width \
        + e * sb * q_width + mask * sb * h
    if plan.flash_attention:
        scores = FP32 * att.heads * sb
    else:
        scores = (e + (mask + e) * mask) * att.heads * s * s * b
    return tokens + scores


def mlp_bytes(spec: ModelSpec, plan: Plan, e: int, ffn: FfnSpec) -> int:
    """One FFN block: its norm's and first matrices' input; per expert a token goes to, the
    activation's input and output (the down projection's input), and in a gated FFN also the
    up projection's output and the product: 2 (4 gated) s b d_ff; the router's logits; the
    dropout mask. Plain, with d_ff = 4h, this is the paper's 19 s b h (plus 2 s b h for the
    norm)."""
    s, b, h = plan.seq_len, plan.batch, spec.d_model
    sb = s * b
    per_width = (4 if ffn.gated else 2) * e * sb
    hidden = per_width * (ffn.top_k * ffn.d_ff + ffn.shared_d_ff)
    router = e * sb * ffn.experts if ffn.is_moe else 0
    return e * sb * h + e * sb * h + hidden + router + (sb * h if plan.dropout else 0)


def activations(spec: ModelSpec, plan: Plan, e: int) -> Activations:
    """Every layer's activations at ``plan.seq_len`` x ``plan.batch`` in ``e``-byte values;
    an encoder-decoder's decoder layers also keep a cross-attention block."""
    kinds: list[tuple[str, int, Share]] = []
    layers = spec.layers
    if spec.ffn_only:
        kinds.append(("ffn", 1, Share(mlp_bytes(spec, plan, e, spec.ffn),
                                      mlp_bytes(spec, plan, e, spec.ffn))))
    else:
        stacks = [("encoder", layers.encoder, 1, spec.ffn)]
        cross = 2 if layers.encoder else 1
        if layers.dense and spec.dense_ffn is not None:
            stacks.append(("dense decoder", layers.dense, cross, spec.dense_ffn))
        stacks.append(("decoder", layers.decoder - layers.dense, cross, spec.ffn))
        for kind, n, blocks, ffn in stacks:
            if n > 0:
                mlp = mlp_bytes(spec, plan, e, ffn)
                kinds.append((kind, n, Share(blocks * attention_bytes(spec, plan, e) + mlp,
                                             mlp)))
    emb = spec.embeddings
    sb = plan.seq_len * plan.batch
    outside = (sb * spec.d_model if plan.dropout and emb is not None else 0)
    if emb is not None and emb.head != "none":
        outside += 2 * e * sb * spec.d_model + FP32 * sb * emb.vocab
    stored = ZERO
    for _, n, one in kinds:
        stored += Share(n * one.total, n * one.ffn)
    inputs = sum(n for _, n, _ in kinds) * e * sb * spec.d_model
    largest = max((one for _, _, one in kinds), key=lambda one: one.total, default=ZERO)
    return Activations(tuple(kinds), outside, stored + Share(outside, 0),
                       Share(inputs + largest.total + outside, largest.ffn))


# ---------------------------------------------------------------------------------------------
# The plan's whole memory.


@dataclass(frozen=True)
class Training:
    """``params --train``: each figure in bytes (parameters for the first two)."""

    plan: Plan
    trainable_params: Share
    lora_params: Share
    weights: Share
    gradients: Share
    master: Share
    optimizer: Share
    activations: Activations

    @property
    def activations_used(self) -> Share:
        return self.activations.recomputed if self.plan.recompute else self.activations.stored

    @property
    def total(self) -> Share:
        return (self.weights + self.gradients + self.master + self.optimizer
                + self.activations_used)


def _frozen_bytes(frozen: Sequence[Tensor], plan: Plan, each: int) -> Share:
    """The base model under LoRA in ``each``-byte values; under QLoRA every linear layer of
    the layers (routers and the pooler included, the output head not, as bitsandbytes'
    default skips lm_head) in NF4, its biases and the rest in ``each``."""
    if plan.mode != "qlora":
        return _sum((t, t.numel * each) for t in frozen)
    return _sum((t, nf4_bytes(t.numel) if t.linear and t.target != HEAD else t.numel * each)
                for t in frozen)


def training(spec: ModelSpec, plan: Plan, names: Mapping[str, str] = PLAN_PARAMETERS
             ) -> Training:
    """The plan's memory: weights, gradients, master weights, optimizer states, activations;
    errors name the plan's fields as ``names`` says."""
    plan.check(names)
    parts = unitemised(spec)
    if parts:
        raise SpecError(f"{spec.name}: {names['mode']}: the memory of fine-tuning it is not "
                        f"counted yet (the tensor inventory lacks {', '.join(parts)}); params "
                        "counts its parameters exactly")
    every = tensors(spec)
    itemised, total = sum(t.numel * t.count for t in every), count(spec).total
    if itemised != total:  # a part the inventory misses: refused, never counted short
        raise SpecError(f"{spec.name}: {names['mode']}: the memory of fine-tuning it is not "
                        f"counted yet (the tensor inventory holds {itemised:,} of its "
                        f"{total:,} parameters); params counts its parameters exactly")
    lora = adapters(spec, plan, names)
    size = dtypes(plan.precision, plan.lora)
    trained = [t for a in lora for t in a.tensors()] if plan.lora else list(every)
    params = _sum((t, t.numel) for t in trained)
    weights = _sum((t, t.numel * size.weight) for t in trained)
    if plan.lora:
        weights += _frozen_bytes(every, plan, size.frozen)
    states = _sum((t, optimizer_bytes(plan.optimizer, t, size.state)) for t in trained)
    shared = _shared_optimizer_bytes(plan.optimizer, trained)
    return Training(
        plan=plan,
        trainable_params=params,
        lora_params=params if plan.lora else ZERO,
        weights=weights,
        gradients=_sum((t, t.numel * size.grad) for t in trained),
        master=_sum((t, t.numel * size.master) for t in trained),
        optimizer=states + Share(shared, 0),
        activations=activations(spec, plan, size.activation),
    )
