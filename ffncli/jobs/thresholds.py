"""Sparsified variants of a model (:class:`Variant`), and thresholds files: the per-layer
cuts a calibration found, saved with the model, rule, target and calibration text named
(``perplexity --save-thresholds``), and applied again, checked against the model they are
applied to (``perplexity --thresholds``, ``relu-stats --thresholds``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.textformats import read_json
from ffncli.base.validate import brief, flag, name, number, share, suggest, whole
from ffncli.compute.sparse import RULES, Cut
from ffncli.errors import InputError

if TYPE_CHECKING:
    from ffncli.compute.forward.transformer import Transformer

FORMAT = "ffncli thresholds"
VERSION = 1
MAX_BYTES = 16 << 20
Entry = tuple[str, float, dict[int, Cut]]  # a rule, its target, each layer's cut


@dataclass(frozen=True)
class Variant:
    """One sparsified model: ``rule`` at ``target``, or (from a thresholds file) ``cuts``
    given per layer."""

    rule: str
    target: float
    cuts: dict[int, Cut] | None = None

    @property
    def label(self) -> str:
        return f"{self.rule} {self.target:.0%}"


def model_identity(model: Transformer) -> dict[str, Any]:
    """What a thresholds file must match: the checkpoint's name, its FFN's shape and the
    fingerprint of its weights."""
    return {"name": Path(model.weights).name, "layers": model.n_layers,
            "d_model": model.d_model, "d_ff": model.spec.ffn.d_ff,
            "fingerprint": model.fingerprint()}


def _cut_json(layer: int, cut: Cut) -> dict[str, Any]:
    if cut.rule == "topk":
        return {"layer": layer, "keep": cut.keep}
    if cut.rule == "teal":
        return {"layer": layer, "threshold": cut.threshold, "down": cut.down}
    return {"layer": layer, "threshold": cut.threshold}


def thresholds_json(model: Transformer, calibration: dict[str, Any] | None,
                    entries: Sequence[Entry]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "model": model_identity(model),
            "calibration": calibration,
            "entries": [{"rule": rule, "target": target,
                         "layers": [_cut_json(i, cut) for i, cut in sorted(cuts.items())]}
                        for rule, target, cuts in entries]}


def thresholds_text(doc: dict[str, Any]) -> str:
    """A thresholds file's text: :func:`thresholds_json`'s document."""
    return json.dumps(doc, indent=1) + "\n"


TOP_KEYS = ("format", "version", "model", "calibration", "entries")
MODEL_KEYS = ("name", "layers", "d_model", "d_ff", "fingerprint")
CALIBRATION_KEYS = ("source", "sha256", "tokens", "evaluated_text")
ENTRY_KEYS = ("rule", "target", "layers")
CUT_KEYS = {"cats": ("layer", "threshold"), "teal": ("layer", "threshold", "down"),
            "topk": ("layer", "keep")}


def _object(where: str, value: Any, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """An object, with none but ``keys`` when given (a misspelt key is not ignored)."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object, got {brief(value)}")
    unknown = [k for k in value if keys is not None and k not in keys]
    if keys is not None and unknown:
        raise InputError(f"{where}: unknown key {brief(unknown[0])}{suggest(unknown[0], keys)}"
                         f"; its keys: {', '.join(keys)}")
    return value


def _list(where: str, value: Any) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list, got {brief(value)}")
    return value


def _cut(where: str, rule: str, item: Any, widths: Sequence[int]) -> tuple[int, Cut]:
    item = _object(where, item, CUT_KEYS[rule])
    layer = whole(f"{where}: key 'layer'", item.get("layer"), minimum=0)
    if rule == "topk":  # at most the layer's units (a layer past the model: checked after)
        keep = whole(f"{where}: key 'keep'", item.get("keep"), minimum=0,
                     maximum=widths[min(layer, len(widths) - 1)])
        return layer, Cut("topk", keep=keep)
    threshold = number(f"{where}: key 'threshold'", item.get("threshold"))
    down = number(f"{where}: key 'down'", item.get("down")) if rule == "teal" else 0.0
    return layer, Cut(rule, threshold=threshold, down=down)


def _model(where: str, value: Any) -> dict[str, Any]:
    """The model a file was made for, each key of the type :func:`model_identity` gives
    (128.0 is no whole number, true no number: neither equals this model's 128 or 1)."""
    made_for = _object(where, value, MODEL_KEYS)
    return {"name": name(f"{where}: key 'name'", made_for.get("name")),
            "fingerprint": name(f"{where}: key 'fingerprint'", made_for.get("fingerprint")),
            **{k: whole(f"{where}: key {k!r}", made_for.get(k))
               for k in ("layers", "d_model", "d_ff")}}


def _calibration(where: str, value: Any) -> None:
    """What calibrated the thresholds, as :func:`thresholds_json` writes it."""
    made = _object(where, value, CALIBRATION_KEYS)
    for key in ("source", "sha256"):
        name(f"{where}: key {key!r}", made.get(key))
    whole(f"{where}: key 'tokens'", made.get("tokens"))
    flag(f"{where}: key 'evaluated_text'", made.get("evaluated_text"))


def load_thresholds(path: Path, model: Transformer) -> list[Variant]:
    """The variants a thresholds file holds, refused in one line when it was made for another
    model (its name or its layers' shapes differ) or is not such a file."""
    data = _object(str(path), read_json(path, "thresholds file", InputError,
                                        MAX_BYTES, kind="a thresholds file"))
    if data.get("format") != FORMAT:
        raise InputError(f"{path}: not a thresholds file (key 'format' is not {FORMAT!r}; "
                         "perplexity --save-thresholds writes one)")
    version = whole(f"{path}: key 'version'", data.get("version"))  # true is not 1
    if version != VERSION:
        raise InputError(f"{path}: key 'version': expected {VERSION}, got {brief(version)}")
    _object(str(path), data, TOP_KEYS)
    if data.get("calibration") is not None:
        _calibration(f"{path}: key 'calibration'", data["calibration"])
    made_for = _model(f"{path}: key 'model'", data.get("model"))
    this = model_identity(model)
    for key in ("layers", "d_model", "d_ff", "fingerprint", "name"):
        if made_for[key] != this[key]:
            raise InputError(f"{path}: made for another model: its {key} is "
                             f"{brief(made_for[key])}, this model's ({model.weights}) is "
                             f"{brief(this[key])}")
    variants: list[Variant] = []
    for n, entry in enumerate(_list(f"{path}: key 'entries'", data.get("entries")), 1):
        variants.append(_variant(f"{path}: entry {n}", entry, variants, model,
                                 layer_widths(model)))
    return variants


def layer_widths(model: Transformer) -> list[int]:
    """Each layer's hidden width as a cut sees it: its FFN's d_ff, an expert's in a mixture
    (a mixture's dense layers, Qwen's mlp_only_layers or DeepSeek's first, their own)."""
    kinds = model.spec.decoder_kinds()
    if len(kinds) != model.n_layers:  # an encoder's layers: all alike
        return [model.spec.d_ff] * model.n_layers
    return [(k.ffn or model.spec.ffn).d_ff for k in kinds]


def _variant(where: str, entry: Any, before: list[Variant], model: Transformer,
             widths: Sequence[int]) -> Variant:
    """One entry of a thresholds file: a rule, a target not given before, and the cuts of
    the layers every entry cuts."""
    entry = _object(where, entry, ENTRY_KEYS)
    rule = entry.get("rule")
    if rule not in RULES:
        raise InputError(f"{where}: key 'rule': expected one of {', '.join(RULES)}, got "
                         f"{brief(rule)}")
    target = share(f"{where}: key 'target'", entry.get("target"))
    twice = [k for k, v in enumerate(before, 1) if (v.rule, v.target) == (rule, target)]
    if twice:
        raise InputError(f"{where}: {rule} at target {target:g} is entry {twice[0]} already")
    cuts: dict[int, Cut] = {}
    for k, item in enumerate(_list(f"{where}: key 'layers'", entry.get("layers")), 1):
        layer, cut = _cut(f"{where}: layer entry {k}", rule, item, widths)
        if layer >= model.n_layers or layer in cuts:
            raise InputError(f"{where}: layer entry {k}: layer {layer} is "
                             + ("listed twice" if layer in cuts else
                                f"past the model's {model.n_layers} layers"))
        cuts[layer] = cut
    if before and set(cuts) != set(before[0].cuts or ()):
        raise InputError(f"{where}: cuts layers {layer_ranges(cuts)}, but entry 1 cuts "
                         f"{layer_ranges(before[0].cuts or ())}: every entry of a "
                         "thresholds file cuts the same layers")
    return Variant(rule, target, cuts)


def layer_ranges(layers: Iterable[int]) -> str:
    """Layers as ``--layer`` writes them, runs joined: ``0, 2-4``."""
    runs: list[list[int]] = []
    for i in sorted(set(layers)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_layers(path: Path, cuts: Iterable[int], layers: Sequence[int], exact: bool) -> None:
    """Refuse ``--layer`` selections the thresholds file at ``path`` does not cut: one it has
    no threshold for, or (``exact``, perplexity: the file is one sparsified model) any set but
    the file's own."""
    have = set(cuts)
    missing = [i for i in layers if i not in have]
    if missing or (exact and have != set(layers)):
        raise InputError(f"option --layer: {path} cuts layers {layer_ranges(have)}, but --layer "
                         f"selects {layer_ranges(layers)}"
                         + (f" (no threshold for layer {layer_ranges(missing)})" if missing
                            else ""))


def layer_thresholds(path: Path, model: Transformer, threshold: float | None,
                     target: float | None) -> dict[int, float]:
    """``relu-stats --thresholds``: each layer's cats threshold from the file's one cats
    entry, or the entry of ``target`` when it holds several."""
    if threshold is not None:
        raise InputError("option --thresholds replaces --threshold: give one or the other")
    cats = [v for v in load_thresholds(path, model) if v.rule == "cats"]
    if target is not None:
        cats = [v for v in cats if abs(v.target - target) < 1e-12]
    if len(cats) != 1:
        have = ", ".join(f"{v.target:g}" for v in load_thresholds(path, model)
                         if v.rule == "cats") or "none"
        raise InputError(f"{path}: relu-stats applies one cats entry; the file's cats targets: "
                         f"{have}" + ("; pick one with --target-sparsity" if len(cats) > 1
                                      or target is not None else ""))
    cuts = cats[0].cuts
    assert cuts is not None
    return {i: cut.threshold for i, cut in sorted(cuts.items())}


def sweep_cuts(path: Path, model: Transformer, layer: str | None, layers: tuple[int, ...],
               threshold: float | None, target: float | None
               ) -> tuple[tuple[int, ...], dict[int, float]]:
    """``relu-stats --text/--ids --thresholds``, in one process or over shards: the layers
    swept (the file's, unless ``--layer`` names them: ``layer``) and each one's cats
    threshold."""
    cuts = layer_thresholds(path, model, threshold, target)
    if layer is None:
        layers = tuple(cuts)
    check_layers(path, cuts, layers, exact=False)
    return layers, cuts
