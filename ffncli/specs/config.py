"""A Hugging Face ``config.json`` as its readers need it: the document read strictly
(:func:`read_config`) and its keys checked, never coerced (:class:`Config`). The readers'
building blocks are in :mod:`ffncli.specs.hfconfig`, which names these too.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ffncli.base import validate
from ffncli.base.textformats import read_json
from ffncli.base.validate import MAX_INT, Keys
from ffncli.errors import ConfigError
from ffncli.specs.renames import ATTRIBUTE_MAPS
from ffncli.specs.rules import MAX_LAYERS
from ffncli.specs.sections import HeadKind

# Hugging Face activation names -> ours.
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
    "sigmoid": "sigmoid",
    "linear": "identity",
}

# The keys that say how many layers a reader lays out (a list a layer, a cache layer a run of
# looped layers): a config's count stops at MAX_LAYERS (a preset's too, rules.py), so 10**12
# layers are one error line, not the memory of a list that long.
LAYER_KEYS = frozenset({
    "num_hidden_layers", "n_layers", "n_layer", "num_layers", "num_decoder_layers",
    "num_encoder_layers", "encoder_layers", "decoder_layers", "num_layers_per_stack",
    "n_recurrent_layers", "n_input_layers", "n_output_layers", "num_blocks",
})


class Config(Keys):
    """A config.json's keys as its readers need them. Values are checked, never coerced:
    booleans are not numbers, 768.0 is not a whole number, a list is not a name, and whole
    numbers stop at 2**53.

    Both spellings of a key its model_type's transformers class renames (``attribute_map``:
    Qwen3-MoE reads ``num_experts``, transformers 5.25 writes ``num_local_experts``) are read
    as one key; an error names the spelling the file holds."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        renames = ATTRIBUTE_MAPS.get(data.get("model_type"), {})  # type: ignore[arg-type]
        both = {**{b: a for a, b in renames.items()}, **renames}
        filled = {key: other for key, other in both.items()
                  if data.get(key) is None and data.get(other) is not None}
        super().__init__({**data, **{key: data[other] for key, other in filled.items()}},
                         source)
        self.spelled = filled  # key read -> the spelling the file holds
        self.other = both

    def where(self, key: str) -> str:
        return super().where(self.spelled.get(key, key))

    def missing(self, key: str) -> ConfigError:
        other = f" (or '{self.other[key]}')" if key in self.other else ""
        return ConfigError(f"{self.source}: missing key '{key}'{other}")

    def whole(self, key: str, default: builtins.int | None = None,
              minimum: builtins.int = 1) -> builtins.int | None:
        """Keys.whole's, a count of layers (LAYER_KEYS) at most MAX_LAYERS."""
        value = super().whole(key, default, minimum)
        return value if value is None else self._layers(key, value)

    def _layers(self, key: str, value: builtins.int) -> builtins.int:
        if key in LAYER_KEYS and value > MAX_LAYERS:
            raise self.fail(key, f"at most {MAX_LAYERS:,} layers")
        return value

    def int(self, key: str, default: int | None = None) -> int:
        """A whole number >= 1, required unless there is a ``default``."""
        return self.required(key) if default is None else self.whole(key) or default

    def bool(self, key: str, default: bool) -> bool:
        return self.flag(key, default)

    def act(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            raise self.fail(key, f"an activation name ({', '.join(ACTIVATIONS)})")
        if value not in ACTIVATIONS:
            raise ConfigError(
                f"{self.source}: key '{key}': unsupported activation {value!r}; supported: "
                f"{', '.join(ACTIVATIONS)}"
            )
        return ACTIVATIONS[value]

    def int0(self, key: str, default: builtins.int = 0) -> builtins.int:
        """A whole number that may be 0 (or null, meaning 0 when the key is present)."""
        if key in self.data and self.data[key] is None:
            return 0
        return self._layers(key, validate.whole(self.where(key), self.data.get(key, default),
                                                0, error=ConfigError))

    def alias(self, keys: tuple[str, ...], default: builtins.int | None = None) -> builtins.int:
        """The first of several names a config may use for one size (``n_layer`` is also
        ``num_hidden_layers``); missing from all, the error names the first."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.int(key)
        return self.int(keys[0], default)

    def ints(self, key: str) -> list[builtins.int]:
        """A list of whole numbers >= 0 (layer indices), empty when absent or null."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT
                for v in value):
            raise self.fail(key, "a list of layer numbers")
        return value

    def names(self, key: str, n: builtins.int | None, choices: Sequence[str],
              shown: Sequence[str] | None = None, what: str = "layer types"
              ) -> list[str] | None:
        """A list of n names (any length but 0 when n is None), each one of ``choices`` (the error
        lists ``shown``, by default the choices); None when the key is absent or null. A
        list may hold anything (``[[1]]``): each element is compared, never hashed."""
        value = self.data.get(key)
        if value is None:
            return None
        listed = isinstance(value, list) and (bool(value) if n is None else len(value) == n)
        if not listed or not all(isinstance(v, str) and v in choices for v in value):
            count = "" if n is None else f"{n} "
            raise self.fail(key, f"a list of {count}{what} ({', '.join(shown or choices)})")
        return value

    def cache_layers(self, key: str, runs: builtins.int, total: builtins.int,
                     where: str | None = None) -> None:
        """Looped layers' cache layers (one a run), ``key`` their ``runs`` (``where``: where
        the file gives it, when not the key itself): at most MAX_LAYERS in all, as the layers
        are."""
        if total > MAX_LAYERS:
            raise ConfigError(f"{where or self.where(key)}: expected at most "
                              f"{MAX_LAYERS:,} cache layers in all (the layers and their "
                              f"runs), got {runs} ({total:,} cache layers)")

    def at_most(self, key: str, value: builtins.int, limit_key: str,
                limit: builtins.int) -> builtins.int:
        if value > limit:
            raise self.fail(key, f"at most {limit_key} ({limit:,})")
        return value

    def heads(self, d: builtins.int, heads_key: str = "num_attention_heads",
              kv_key: str | None = "num_key_value_heads",
              head_dim: builtins.int | None = None, d_key: str = "hidden_size",
              default: builtins.int | None = None) -> tuple[builtins.int, builtins.int]:
        """(heads, kv_heads), checked: kv heads divide the heads, and without a head_dim the
        heads divide the width."""
        heads = self.int(heads_key, default)
        kv = self.int(kv_key, heads) if kv_key else heads
        if kv > heads or heads % kv:
            raise self.fail(kv_key or heads_key, f"a divisor of {heads_key} ({heads})")
        if head_dim is None and d % heads:
            raise self.fail(heads_key, f"a divisor of {d_key} ({d:,})")
        return heads, kv

    def head(self, tie_default: builtins.bool) -> HeadKind:
        return "tied" if self.bool("tie_word_embeddings", tie_default) else "untied"

    def name(self, default: str) -> str:
        """The model's name: ``_name_or_path`` when it is a non-empty string."""
        value = self.data.get("_name_or_path")
        if value is None or value == "":
            return default
        if not isinstance(value, str):
            raise self.fail("_name_or_path", "a string")
        return value


def read_config(path: Path) -> Any:
    """A config.json's document: a regular file of at most 4 MiB, strict JSON (no duplicate
    keys or nesting past 64 levels) but for the ``Infinity``, ``-Infinity`` and ``NaN`` that
    transformers writes into config files (Mamba-2's time_step_limit), read as those floats."""
    return read_json(path, "config file", ConfigError, constants=True)
