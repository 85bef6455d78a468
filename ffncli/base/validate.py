"""Every value checked in one place, with one message style: ``<where>: expected ..., got ...``.

``where`` names what the user wrote: ``option --layer`` for an option, ``config.json: key
'n_embd'`` for a key of a file. Preset keys, config.json keys, what-if overrides and option
values all go through these functions. Values are checked, never coerced: booleans are not
numbers, 512.0 is not a whole number, NaN and infinity are refused (``value <= 0`` is false
for NaN, so every comparison here is written to refuse it). No NumPy here: ``params`` uses it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ffncli.base import record
from ffncli.errors import ConfigError, FfnError, InputError

MAX_INT = 2**53  # the largest whole number a preset, config or option may give (exact as a double)


@record
class Sizing:
    """How the errors about memory name what the caller can change: a library call's
    parameters by default; a command passes its options (ffncli.jobs.resolve.SIZING_OPTIONS)."""

    budget: str = "max_memory"  # what to raise
    value: str = "max_memory"  # before a bad value: "max_memory: expected ..."
    shape: str = "d_model, d_ff, experts"  # what to shrink


LIBRARY_SIZING = Sizing()  # a library call's words


@record
class Words:
    """How an error or a hint names what the caller gave: a library call's parameters by
    default (``ctx: expected ...``, ``ids=FILE``); a command passes its options
    (ffncli.jobs.choices.OPTIONS: ``option --ctx: expected ...``, ``--ids FILE``), each the
    parameter's name with ``-`` for ``_``, bar those ``renamed`` ((parameter, option) pairs)."""

    options: bool = False
    renamed: tuple[tuple[str, str], ...] = ()

    def name(self, parameter: str) -> str:
        """``target_sparsity``, or the option ``--target-sparsity``."""
        if not self.options:
            return parameter
        return dict(self.renamed).get(parameter) or "--" + parameter.replace("_", "-")

    def where(self, parameter: str) -> str:
        """What an error about its value begins with: ``ctx``, or ``option --ctx``."""
        return f"option {self.name(parameter)}" if self.options else parameter

    def given(self, parameter: str, value: object) -> str:
        """The parameter given a value: ``ids=FILE``, or ``--ids FILE``."""
        return f"{self.name(parameter)} {value}" if self.options else f"{parameter}={value}"


PARAMETERS = Words()  # a library call's words


def brief(value: object) -> str:
    """A short repr of a value, for an error message: long strings, lists, mappings and
    integers are cut in the middle (``[1, 2, 3, 4, 5, 6, ...]``)."""
    import reprlib  # only on the error path

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, 6, 6, 4, 6
    r.maxstring, r.maxlong, r.maxother = 60, 40, 60
    try:
        return r.repr(value)
    except ValueError:  # an int too long for str(): cannot come from our parsers
        return "a very long integer"


def fail(where: str, expected: str, value: object,
         error: type[FfnError] = InputError) -> FfnError:
    """The one message style: ``<where>: expected <expected>, got <value>``."""
    return error(f"{where}: expected {expected}, got {brief(value)}")


def whole(where: str, value: Any, minimum: int = 1, maximum: int = MAX_INT,
          error: type[FfnError] = InputError) -> int:
    """A whole number from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(where, f"a whole number >= {minimum}", value, error)
    if value > maximum:
        raise fail(where, f"at most 2**53 ({MAX_INT:,})" if maximum == MAX_INT else
                   f"a whole number from {minimum} to {maximum}", value, error)
    return value


def number(where: str, value: Any, *, positive: bool = False,
           error: type[FfnError] = InputError) -> float:
    """A finite number, > 0 with ``positive`` (``a positive number``), else >= 0."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value) and (value > 0 if positive else value >= 0))
    if not ok:
        raise fail(where, "a positive number" if positive else "a number >= 0", value, error)
    return float(value)


def share(where: str, value: Any, error: type[FfnError] = InputError) -> float:
    """A share from 0 to below 1: a calibration's target (--target-sparsity, a thresholds
    file's entries), the one meaning every command gives it. 0 is a target too (T is then the
    smallest magnitude); -0 is 0."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 1
    if not ok:
        raise fail(where, "a share from 0 to below 1", value, error)
    return float(value) + 0.0


def flag(where: str, value: Any, error: type[FfnError] = InputError) -> bool:
    if not isinstance(value, bool):
        raise fail(where, "true or false", value, error)
    return value


def name(where: str, value: Any, choices: Sequence[str] | None = None,
         error: type[FfnError] = InputError) -> str:
    """A non-empty string, one of ``choices`` when given (with a close match suggested)."""
    if not isinstance(value, str) or not value:
        raise fail(where, "a non-empty string", value, error)
    if choices is not None and value not in choices:
        raise error(f"{where}: expected one of {', '.join(choices)}, got {brief(value)}"
                    + suggest(value, choices))
    return value


def suggest(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class Keys:
    """Typed access to the keys of one mapping a file holds (a config.json, GGUF metadata),
    each value checked as above, with errors naming the file and the key: ``<source>: key
    'x': expected ..., got ...`` and ``<source>: missing key 'x'``. A key set to null counts
    as missing. ``kind`` names what the keys are (``metadata key`` for GGUF)."""

    def __init__(self, data: dict[str, Any], source: str, error: type[FfnError] = ConfigError,
                 kind: str = "key") -> None:
        self.data, self.source, self.error_type, self.kind = data, source, error, kind

    def where(self, key: str) -> str:
        return f"{self.source}: {self.kind} '{key}'"

    def fail(self, key: str, expected: str) -> FfnError:
        return self.error_type(f"{self.where(key)}: expected {expected}, got "
                          f"{brief(self.data.get(key))}")

    def missing(self, key: str) -> FfnError:
        return self.error_type(f"{self.source}: missing {self.kind} '{key}'")

    def whole(self, key: str, default: int | None = None, minimum: int = 1) -> int | None:
        """A whole number >= ``minimum``, or ``default`` when the key is missing."""
        value = self.data.get(key)
        if value is None:
            return default
        return whole(self.where(key), value, minimum, error=self.error_type)

    def required(self, key: str, minimum: int = 1) -> int:
        """A whole number >= ``minimum`` that must be there."""
        value = self.whole(key, None, minimum)
        if value is None:
            raise self.missing(key)
        return value

    def number(self, key: str, default: float | None = None) -> float:
        """A positive finite number; required when there is no ``default``."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise self.missing(key)
            return default
        return number(self.where(key), value, positive=True, error=self.error_type)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        return default if value is None else flag(self.where(key), value, self.error_type)

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(key, "a string")
        return value

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            raise self.fail(key, "an object")
        return value


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def size(where: str, text: str) -> tuple[int, int]:
    """A memory size with its unit, decimal (``24GB``) or binary (``24GiB``), or several
    devices' (``2x80GB``, their sum): (bytes, devices). No unit, zero, a negative or a
    non-number is refused."""
    import re
    from decimal import Decimal, InvalidOperation

    match = re.fullmatch(r"\s*(?:(\d+)\s*[x*]\s*)?([0-9]*\.?[0-9]+)\s*([A-Za-z]+)\s*", text)
    unit = match and _UNITS.get(match.group(3).lower())
    if not match or not unit:
        raise fail(where, "a size with its unit, such as 24GB, 24GiB or 2x80GB (units: B, KB, "
                   "MB, GB, TB, KiB, MiB, GiB, TiB)", text)
    try:  # Decimal, not int(): 5,000 digits are past int()'s limit of 4,300
        devices = Decimal(match.group(1) or 1)
        amount = Decimal(match.group(2)) * unit * devices
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise fail(where, "a number before the unit", text) from None
    if amount > MAX_INT or devices > MAX_INT:
        raise fail(where, f"a size of at most 2**53 bytes ({MAX_INT:,})", text)
    if int(amount) <= 0 or devices <= 0:
        raise fail(where, "a size above zero", text)
    return int(amount), int(devices)


def reserve(where: str, text: str, total: int) -> int:
    """Bytes held back from ``total``: a share (``10%``) or a size (``2GB``), under it."""
    from decimal import Decimal, InvalidOperation

    if text.strip().endswith("%"):
        try:
            share = Decimal(text.strip()[:-1])
        except InvalidOperation:
            raise fail(where, "a percentage such as 10% or a size such as 2GB", text) from None
        if not share.is_finite() or not 0 <= share < 100:
            raise fail(where, "a percentage from 0% to below 100%", text)
        return int(total * share / 100)
    held, _ = size(where, text)
    if held >= total:
        raise fail(where, f"less than the memory given ({total:,} bytes)", text)
    return held
