"""What ``params`` and ``presets`` answer: a spec's count beside a checkpoint's (and whether
they match), a checkpoint counted from its headers alone, every built-in preset in a line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ffncli.base import record
from ffncli.counting.kv import KvCache
from ffncli.counting.model import ModelCount, count
from ffncli.specs.spec import ModelSpec, load_preset, preset_names

if TYPE_CHECKING:  # a file's count and a plan's: imported by what makes them, not by a preset's
    from ffncli.counting.files import FileCount
    from ffncli.counting.fit import Budget, FitCell, TrainFit
    from ffncli.counting.training import Training

# ---------------------------------------------------------------------------------------------
# A spec against a checkpoint's header, and the built-in presets at a glance.


@record
class ParamsResult:
    """``params``: the spec's count and, with ``--weights``, the file's count beside it."""

    count: ModelCount
    file: FileCount | None = None
    weights_path: str | None = None
    kv: KvCache | None = None  # the KV cache at the spec's seq_len and --batch
    training: Training | None = None  # --train: the plan's memory
    budget: Budget | None = None  # --fit: the memory given
    fit: tuple[FitCell, ...] = ()  # --fit: every weight dtype x cache dtype, for inference
    train_fit: TrainFit | None = None  # --fit with --train: the plan against the budget
    context: int | None = None  # --fit: the model's own context limit (not applied)

    @property
    def mismatches(self) -> dict[str, tuple[int, int]]:
        """Groups whose spec and file counts differ: {group: (spec, file)}."""
        if self.file is None:
            return {}
        from ffncli.counting.files import GROUPS

        spec_groups = {**dict.fromkeys(GROUPS, 0), **self.count.groups}
        return {g: (spec_groups[g], self.file.groups[g]) for g in GROUPS
                if spec_groups[g] != self.file.groups[g] and not self.task_head(g)}

    def task_head(self, group: str) -> bool:
        """A base model's spec (no output head) against a file saved from a task class
        (masked-LM, pre-training): the class's head, and the pooler it leaves out, are not
        the base model's and not a mismatch."""
        emb = self.count.spec.embeddings
        if self.file is None or emb is None or emb.head != "none":
            return False
        has_head = self.file.groups["head"] > 0
        return group == "head" or (group == "pooler" and has_head
                                   and self.file.groups["pooler"] == 0)

    @property
    def matches(self) -> bool:
        return not self.mismatches


@record
class FileOnlyResult:
    """A checkpoint counted from its header alone: no config reader checked it."""

    file: FileCount
    weights_path: str
    reason: str  # why no spec: the config's model_type is unsupported, or none was given

    @property
    def matches(self) -> bool:
        return True  # nothing to compare the file with: not a mismatch


@record
class PresetSummary:
    """One built-in preset in one line (the fields of ``presets --json``)."""

    name: str
    family: str
    d_model: int
    d_ff: int
    activation: str
    layers: int  # encoder + decoder layers; 0 for an FFN-only spec
    total_params: int
    active_params: int
    description: str


def summarize(spec: ModelSpec) -> PresetSummary:
    c = count(spec)
    return PresetSummary(
        name=spec.name, family=spec.family, d_model=spec.d_model, d_ff=spec.ffn.d_ff,
        activation=spec.ffn.label,
        layers=spec.layers.encoder + spec.layers.decoder if not spec.ffn_only else 0,
        total_params=c.total, active_params=c.active, description=spec.description)


def presets_summary() -> tuple[PresetSummary, ...]:
    """Every built-in preset, counted."""

    return tuple(summarize(load_preset(name)) for name in preset_names())
