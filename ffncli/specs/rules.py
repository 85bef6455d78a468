"""What each key of a spec accepts, and a spec's mapping (a preset's YAML) built into its frozen
dataclasses by those rules, never coerced: one message format ("<source>: <key>: expected ...,
got ..."). The rules across keys are :func:`ffncli.specs.spec.check_spec`'s. No NumPy here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ffncli.base import validate
from ffncli.base.validate import suggest
from ffncli.errors import SpecError, shown

# Activations applied elementwise. ``gelu`` is the exact (erf) GELU; ``gelu_tanh`` is the tanh
# approximation (GPT-2's ``gelu_new``, PyTorch's ``approximate="tanh"``). ``swish`` is
# ``silu`` with a ``beta`` other than 1.
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swish", "sigmoid", "identity")

# The GLU family (Shazeer, 2020): act(x W + b) * (x V + c), each name a gated activation.
GLU_VARIANTS = {
    "glu": "sigmoid",
    "reglu": "relu",
    "geglu": "gelu",
    "swiglu": "silu",
    "bilinear": "identity",
}

_CHOICES: dict[str, tuple[str, ...]] = {
    "ffn.activation": ACTIVATIONS,
    "norm.kind": ("layernorm", "rmsnorm"),
    "embeddings.head": ("tied", "untied", "none"),
    "attention.qk_norm": ("none", "head", "heads"),
}

_MINIMUM: dict[str, int] = {  # keys whose integers may be 0; every other integer must be >= 1
    "attention.relative_buckets": 0,
    "embeddings.relative": 0,
    "norm.per_layer": 0,
    "layers.encoder": 0,
    "layers.decoder": 0,
    "embeddings.positions": 0,
    "embeddings.position_offset": 0,
    "embeddings.token_types": 0,
    "init.seed": 0,
    "ffn.shared_d_ff": 0,
    "dense_ffn.shared_d_ff": 0,
    "attention.kv_lora_rank": 0,
    "attention.q_lora_rank": 0,
    "attention.rope_head_dim": 0,
    "attention.index_heads": 0,
    "attention.index_head_dim": 0,
    "ffn.zero_experts": 0,
    "dense_ffn.zero_experts": 0,
    "layers.dense": 0,
}


# The most layers a spec lays out, a list a layer (a config's count, specs/config.py, stops
# there too): 10**12 layers are one error line, not the memory of a list that long.
MAX_LAYERS = 2**16
_LAYERS = ("layers.encoder", "layers.decoder", "layers.dense")


def _check_value(source: str, key: str, value: Any, annotation: str) -> Any:
    """One key's value, checked by ``validate`` (never coerced)."""
    where = f"{source}: key '{key}'"
    if value is None:
        if "None" in annotation:
            return None
        raise validate.fail(where, _describe(key, annotation), value, SpecError)
    if annotation.startswith("bool"):
        return validate.flag(where, value, SpecError)
    if annotation.startswith("int"):
        return validate.whole(where, value, _MINIMUM.get(key, 1),
                              MAX_LAYERS if key in _LAYERS else validate.MAX_INT, SpecError)
    if annotation.startswith("float"):
        return validate.number(where, value, positive=True, error=SpecError)
    return validate.name(where, value, _CHOICES.get(key), SpecError)


def _describe(key: str, annotation: str) -> str:
    if annotation.startswith("int"):
        return "a whole number >= 0" if _MINIMUM.get(key, 1) == 0 else "a whole number >= 1"
    return "a value"


def build(source: str, cls: type, data: Any, sections: Mapping[str, type],
          skipped: frozenset[str], prefix: str = "") -> Any:
    """A mapping (a preset's YAML) as the frozen dataclass ``cls``, each key checked by its
    field's type and the tables above; at the top level, the keys in ``sections`` are
    mappings built as their classes. Fields in ``skipped`` are not keys."""
    where = prefix.rstrip(".") or "top level"
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: '{where}' must be a mapping of keys to values, got "
                        f"{validate.brief(data)}")
    allowed = {f.name: f for f in fields(cls) if f.name not in skipped}
    for key in data:
        if key not in allowed:
            raise SpecError(
                f"{source}: unknown key '{prefix}{shown(key)}'"
                f"{suggest(str(key), list(allowed))}; "
                f"allowed keys: {', '.join(allowed)}"
            )
    values: dict[str, Any] = {}
    for name, f in allowed.items():
        if name not in data:
            no_default = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            if no_default:
                raise SpecError(f"{source}: missing key '{prefix}{name}'")
            continue
        if not prefix and name in sections:
            if data[name] is None and "None" in str(f.type):
                values[name] = None
            else:
                values[name] = build(source, sections[name], data[name], sections, skipped,
                                     f"{prefix}{name}.")
        else:
            values[name] = _check_value(source, f"{prefix}{name}", data[name], str(f.type))
    return cls(**values)
