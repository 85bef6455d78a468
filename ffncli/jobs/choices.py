"""The options that travel together, as frozen records: which model (``ModelChoice``), which
tokens (``TokenChoice``), which text (``TextChoice``), where the work runs (``ScaleChoice``),
and the one grammar of ``--layer``. Nothing is read here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base import record
from ffncli.base.validate import Words, fail, whole
from ffncli.errors import InputError

if TYPE_CHECKING:  # imported when a plan is made: the counting modules stay off start-up
    from ffncli.counting.fit import Budget
    from ffncli.counting.training import Plan


# How the lower layers' errors and hints name what a command was given: its options, each a
# library parameter's name with - for _ (a library call names the parameters themselves:
# ffncli.base.validate.PARAMETERS); the function checked by permute-check is --impl's.
OPTIONS = Words(options=True, renamed=(("fn", "--impl"),))


@record
class ModelChoice:
    """Which FFN a command runs: ``--preset`` or ``--config`` (or the config.json beside the
    weights), ``--weights`` or ``--model`` (else random weights from the spec's seed),
    ``--layer``, ``--dtype`` and ``--max-memory``."""

    preset: str | None = None
    config: Path | None = None
    weights: Path | None = None
    hub_model: str | None = None  # --model ORG/NAME[@REVISION], from the local cache
    layer: str | None = None  # N; with --text or --ids also A-B or all
    dtype: str = "float32"
    max_memory: str | None = None

    def index(self) -> int:
        """The one layer ``--layer`` names (default 0): ``N`` of :func:`parse_layers`."""
        if self.layer is None:
            return 0
        text = self.layer.strip()
        number = layer_number(text.removeprefix("-"))  # -1 is refused as the number it is
        if number is not None and text.startswith("-"):
            number = -number
        return whole("option --layer", self.layer if number is None else number, 0)


@record
class TokenChoice:
    """Which tokens: ``--input`` a file, or ``--random N`` drawn with ``--seed``; NaN and
    infinity refused unless ``--allow-nonfinite``."""

    input: Path | None = None
    random: int | None = None
    seed: int = 0
    allow_nonfinite: bool = False


@record
class TextChoice:
    """Real text through the whole model: ``--text`` (tokenised with the model's tokenizer)
    or ``--ids`` (token ids, no tokenizer)."""

    text: Path | None = None
    ids: Path | None = None

    @property
    def given(self) -> bool:
        return self.text is not None or self.ids is not None

    def one(self, words: Words = OPTIONS) -> None:
        """``--text`` or ``--ids``, not both: checked where the text is read."""
        one_text(self.text, self.ids, words)

    def refuse(self, tokens: TokenChoice) -> None:
        """Real text and token vectors are two ways to feed the FFN: not both."""
        if tokens != TokenChoice(seed=tokens.seed):
            raise InputError("give --text/--ids (real text through the model) or "
                             "--input/--random (tokens given to one layer's FFN), not both")


def one_text(text: Path | None, ids: Path | None, words: Words = OPTIONS) -> None:
    """A text is given as words (``--text``) or as token ids (``--ids``), not both: the one
    check of it, for every command and the library (``words``: its parameters)."""
    if text is not None and ids is not None:
        raise InputError(f"give {words.name('text')} or {words.name('ids')}, not both")


def parse_layers(text: str | None, n_layers: int, where: str = "option --layer"
                 ) -> tuple[int, ...]:
    """``--layer``: ``N``, ``A-B`` (both included) or ``all`` (the default) of ``n_layers``;
    ``where`` names it in errors (a library call: ``layers``)."""
    if text is None or text == "all":
        return tuple(range(n_layers))
    first, dash, last = text.partition("-")
    a = layer_number(first)
    b = layer_number(last) if dash else a
    if a is None or b is None:
        raise fail(where, "a layer N, a range A-B or all", text)
    if a > b:
        raise InputError(f"{where}: the range {text} runs backwards; write {b}-{a}")
    if b >= n_layers:
        raise fail(where, f"layers of 0-{n_layers - 1}", text)
    return tuple(range(a, b + 1))


def layer_number(text: str) -> int | None:
    """A layer's number, ASCII digits only (``str.isdigit`` also takes '٣' and '１'), or None
    (digits beyond int()'s limit too)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


_GLOB_MAGIC = ("*", "?", "[")
WORKERS_PER_CORE = 4  # --workers at most this many a core: more only wait, each with a model


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


@record
class ScaleChoice:
    """Where the work runs: this process (the default), ``--workers N`` local processes, or
    the Dask cluster at ``--scheduler ADDRESS``; ``--skip-bad`` goes on past a bad shard;
    ``--verbose`` lets Dask's own log lines through to stderr."""

    workers: int | None = None
    scheduler: str | None = None
    skip_bad: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        """``--workers`` checked once, before anything starts: from 1 to WORKERS_PER_CORE
        a core."""
        if self.workers is None:
            return
        whole("option --workers", self.workers, 1)
        cores = usable_cores()
        if self.workers > WORKERS_PER_CORE * cores:
            raise InputError(
                f"option --workers: expected at most {WORKERS_PER_CORE * cores} "
                f"({WORKERS_PER_CORE} a core, {cores} core{'s' * (cores != 1)} here: each "
                f"worker is a process holding its own copy of the weights, and at most one a "
                f"core runs at a time), got {self.workers}")

    def wanted(self, tokens: TokenChoice | None = None, text: TextChoice | None = None) -> bool:
        """Whether the command takes the sharded path (ffncli/cli/sharded.py): a glob or a
        folder for its input (--text/--ids when given, else --input), or a cluster asked for.
        (One text file alone is the sweep of ffncli.jobs.sweep: one walk.)"""
        if text is not None and text.given:
            given = text.text if text.text is not None else text.ids
        else:
            given = tokens.input if tokens is not None else None
        return self.workers is not None or self.scheduler is not None or self.skip_bad or (
            given is not None and is_many(given))


def is_many(path: Path) -> bool:
    """A folder, or a glob (a name with * ? [ that is not itself a file)."""
    if os.path.isdir(path):
        return True
    return any(c in str(path) for c in _GLOB_MAGIC) and not os.path.lexists(path)


def not_shares(part: str) -> InputError:
    """perplexity's ``--target-sparsity S[,S...]`` with a part that is not a number: the one
    line of its parser (ffncli.cli.options.shares) and its reader (jobs.perplexity)."""
    return InputError(f"option --target-sparsity: expected shares such as 0.5 or 0.25,0.5, got "
                      f"{part.strip()!r}")


# How the errors about a model and the what-if name a command's options (a library call names
# its parameters: ffncli.specs.spec.SPEC_PARAMETERS).
SPEC_OPTIONS = {key: f"option --{key.replace('_', '-')}" for key in (
    "d_model", "d_ff", "activation", "experts", "top_k", "capacity_factor", "beta",
    "match_params", "multiple_of", "seq_len")} | {
    "gating": "--activation swiglu (or geglu, reglu, glu, bilinear) or --gated",
    "model": "--preset or --config"}

# How params --train's errors name its options (a library call names its parameters).
TRAIN_OPTIONS = {"mode": "option --train", "optimizer": "option --optimizer",
                 "precision": "option --precision", "lora_rank": "option --lora-rank",
                 "lora_targets": "option --lora-targets", "seq_len": "option --seq-len",
                 "batch": "option --batch"}


@record
class TrainChoice:
    """``params --train`` and its options, and ``--fit``/``--reserve``: a training plan
    (:class:`ffncli.counting.training.Plan`) and a memory budget, or None when not asked."""

    train: str | None = None
    optimizer: str | None = None
    precision: str | None = None
    lora_rank: int | None = None
    lora_targets: str | None = None
    flash_attention: bool = False
    recompute: bool = False
    dropout: bool = True
    fit: str | None = None
    reserve: str | None = None

    def plan(self) -> Plan | None:
        """The plan (seq_len and batch filled in by the job), or None without ``--train``;
        training options without it, or LoRA's without LoRA, are refused."""
        if self.train is None:
            self._refuse_without_train()
            return None
        if self.train == "full" and (self.lora_rank is not None or self.lora_targets):
            raise InputError("--lora-rank and --lora-targets need --train lora or qlora")
        from ffncli.counting.training import Plan

        targets = None if self.lora_targets is None else tuple(
            t.strip() for t in self.lora_targets.split(",") if t.strip())
        given: dict[str, Any] = {"optimizer": self.optimizer or None,
                                 "precision": self.precision or None,
                                 "lora_rank": self.lora_rank, "lora_targets": targets}
        return Plan(mode=self.train, flash_attention=self.flash_attention,  # None: default
                    recompute=self.recompute, dropout=self.dropout,
                    **{k: v for k, v in given.items() if v is not None}).check(TRAIN_OPTIONS)

    def _refuse_without_train(self) -> None:
        """The options that shape a plan, refused when no plan is asked for."""
        given = [name for name, value in (
            ("--optimizer", self.optimizer), ("--precision", self.precision),
            ("--lora-rank", self.lora_rank), ("--lora-targets", self.lora_targets),
            ("--flash-attention", self.flash_attention or None),
            ("--recompute", self.recompute or None),
            ("--no-dropout", None if self.dropout else True)) if value is not None]
        if given:
            raise InputError(f"{', '.join(given)} plan training: give --train full, lora "
                             "or qlora with them")

    def budget(self) -> Budget | None:
        """``--fit`` as a :class:`ffncli.counting.fit.Budget`, or None."""
        if self.fit is None:
            if self.reserve is not None:
                raise InputError("--reserve holds memory back from --fit: give --fit too")
            return None
        from ffncli.base.validate import reserve, size
        from ffncli.counting.fit import Budget

        total, devices = size("option --fit", self.fit)
        held = reserve("option --reserve", self.reserve, total) if self.reserve else 0
        return Budget(self.fit.strip(), total, devices, held)
