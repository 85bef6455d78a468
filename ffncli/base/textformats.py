"""Strict, bounded readers of the small text formats users hand us: YAML presets, JSON configs
and the JSON header of a .safetensors file; and the cells of the Markdown and CSV tables that
``--format`` writes, whose names come from those files (see :func:`csv_cell`).

Both parsers refuse what the standard libraries let through or crash on:

- duplicate keys (``json`` and ``yaml`` silently keep the last one);
- nesting deeper than :data:`MAX_DEPTH` (``json`` and PyYAML's composer recurse once per
  level, so 100,000 nested brackets end in ``RecursionError``): checked before they recurse;
- JSON's non-standard ``NaN``, ``Infinity`` and numbers that round to infinity;
- integer literals over :data:`MAX_DIGITS` digits (Python refuses over 4,300 with a
  ``ValueError``, and converting them is quadratic);
- YAML documents of more than :data:`MAX_YAML_NODES` values once aliases are expanded (a
  "billion laughs" document is a few hundred bytes), and aliases to a node that contains them;
- YAML scalars whose explicit tag does not fit (``!!int abc`` raises ``ValueError`` in PyYAML).

A problem is raised as :class:`Malformed`, with the line and column where known; each reader
turns it into its own one-line ``FfnError``. This module does not import NumPy.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from ffncli.base.files import open_file
from ffncli.base.validate import brief
from ffncli.errors import FfnError

MAX_TEXT_BYTES = 4 * 1024 * 1024  # presets and configs are a few KB; 4 MiB is ample
MAX_DEPTH = 64  # presets nest 2 levels, configs 4, safetensors headers 3
MAX_YAML_NODES = 10_000  # values in a YAML document, aliases expanded; presets hold ~50
MAX_DIGITS = 100  # digits of one integer literal


class Malformed(Exception):
    """What is wrong with a text, and where (1-based line and column, when known)."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None):
        super().__init__(problem)
        self.problem, self.line, self.column = problem, line, column

    @property
    def where(self) -> str:
        """`` at line L, column C``, or nothing when the place is not known."""
        return "" if self.line is None else f" at line {self.line}, column {self.column}"


def read_text(path: Path, what: str, error: type[FfnError],
              max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A small UTF-8 text file: refused before opening if it is not a regular file of at
    most ``max_bytes`` (a FIFO would block, /dev/zero never ends); OS errors are one line."""
    with open_file(path, what, error, max_bytes) as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:  # it grew after it was checked
        raise error(f"{what} {path} is over {max_bytes:,} bytes; at most {max_bytes:,} are read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: not a UTF-8 text file") from None


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


# ---------------------------------------------------------------------------------------------
# JSON.

# A JSON string; an unterminated one runs to the end (so one pass is linear, never quadratic).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _json_too_deep(text: str, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit``, brackets inside strings aside.
    Runs before ``json.loads``, which recurses once per level."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if brackets.count("[") + brackets.count("{") <= limit:
        return False
    depth = 0
    for i in range(0, len(brackets), 4096):  # chunks: a run of '[' stops at the first one
        levels = list(accumulate(map(_STEP.__getitem__, brackets[i:i + 4096]), initial=depth))
        if max(levels) > limit:
            return True
        depth = levels[-1]
    return False


class _Refused(Exception):
    """Raised inside ``json.loads`` by a hook; ``token`` is the literal refused, if any."""

    def __init__(self, problem: str, token: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.token = problem, token


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {brief(key)}")
            seen.add(key)
    return mapping


def _no_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number JSON allows", name)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"number {brief(literal)} is out of range (it rounds to infinity)",
                       literal)
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_DIGITS:
        raise _Refused(f"an integer of {len(literal.lstrip('-')):,} digits (at most "
                       f"{MAX_DIGITS} are read)", literal)
    return int(literal)


def _locate(text: str, token: str) -> tuple[int, int] | tuple[None, None]:
    """Line and column of the first ``token`` outside strings: ``json.loads`` reads left to
    right, so that is the one a hook refused."""
    pattern = re.compile(_JSON_STRING.pattern + r"|(?<![\w.+-])(" + re.escape(token)
                         + r")(?![\w.])", re.S)
    for m in pattern.finditer(text):
        if m.group(1) is not None:
            return _line_column(text, m.start(1))
    return None, None


# What Python's json writes for the non-finite floats (transformers' config.json files hold
# them: Mamba-2's time_step_limit is [0.0, Infinity]).
_CONSTANTS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _constant(name: str) -> float:
    return _CONSTANTS[name]


def parse_json(text: str, *, constants: bool = False) -> Any:
    """Parse JSON strictly (see the module's docstring); raises :class:`Malformed`. With
    ``constants`` (config files only), ``Infinity``, ``-Infinity`` and ``NaN`` are read as
    the floats Python's json writes them for; a literal that rounds to infinity stays refused."""
    if _json_too_deep(text, MAX_DEPTH):
        raise Malformed(f"arrays and objects nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys,
                          parse_constant=_constant if constants else _no_constant,
                          parse_float=_finite_float, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise Malformed(exc.msg, exc.lineno, exc.colno) from None
    except _Refused as exc:
        line, column = _locate(text, exc.token) if exc.token else (None, None)
        raise Malformed(exc.problem, line, column) from None


def read_json(path: Path, what: str, error: type[FfnError], max_bytes: int = MAX_TEXT_BYTES,
              *, kind: str | None = None, after: str = "", constants: bool = False) -> Any:
    """A small JSON file, read by :func:`read_text` and parsed by :func:`parse_json`; bad JSON
    is one ``error`` line: ``PATH: invalid JSON at ...: PROBLEM``, or with ``kind`` ``PATH:
    not KIND (not valid JSON at ...: PROBLEM)``, then ``after``. ``constants``: see
    :func:`parse_json` (config files only)."""
    text = read_text(path, what, error, max_bytes)
    try:
        return parse_json(text, constants=constants)
    except Malformed as exc:
        bad = f"invalid JSON{exc.where}: {exc.problem}" if kind is None else \
            f"not {kind} (not valid JSON{exc.where}: {exc.problem})"
        raise error(f"{path}: {bad}{after}") from None


# ---------------------------------------------------------------------------------------------
# YAML.


def _strict_loader() -> type:
    """The SafeLoader subclass, built on first use: only preset loading imports yaml."""
    import yaml
    from yaml.composer import ComposerError
    from yaml.constructor import ConstructorError
    from yaml.events import AliasEvent, CollectionStartEvent
    from yaml.nodes import MappingNode, ScalarNode

    merge_tag = "tag:yaml.org,2002:merge"

    class StrictLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.depth = 0  # collections open
            self.values = 0  # nodes composed so far, each alias counted as what it expands to
            self.sizes: dict[Any, int] = {}  # node -> its expanded size, once composed

        def count(self, n: int, mark: Any, alias: bool) -> None:
            self.values += n
            if self.values > MAX_YAML_NODES:
                what = "aliases expand to" if alias else "the document holds"
                raise ComposerError(None, None, f"{what} more than {MAX_YAML_NODES:,} values",
                                    mark)

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                node = self.anchors.get(event.anchor)
                if node is not None:  # an undefined alias is reported by the base class
                    if node not in self.sizes:
                        raise ComposerError(None, None, f"alias *{event.anchor} refers to a "
                                            "node that contains it", event.start_mark)
                    self.count(self.sizes[node], event.start_mark, alias=True)
                return super().compose_node(parent, index)
            opens = isinstance(event, CollectionStartEvent)
            self.depth += opens
            if self.depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                    event.start_mark)
            before = self.values
            self.count(1, event.start_mark, alias=False)
            node = super().compose_node(parent, index)
            self.depth -= opens
            self.sizes[node] = self.values - before
            return node

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            if not isinstance(node, ScalarNode):
                return super().construct_object(node, deep)
            if node.tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_DIGITS:
                raise ConstructorError(None, None, f"an integer of {len(node.value):,} "
                                       f"characters (at most {MAX_DIGITS} are read)",
                                       node.start_mark)
            try:
                return super().construct_object(node, deep)
            except (ValueError, KeyError, IndexError, AttributeError, TypeError):
                # PyYAML's scalar constructors on an explicit tag: !!int abc, !!bool maybe
                raise ConstructorError(None, None, f"{node.value!r} is not a valid "
                                       f"{node.tag.rsplit(':', 1)[-1]}",
                                       node.start_mark) from None

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == merge_tag:
                        continue  # '<<: *base' keys may be overridden, that is their point
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                    except TypeError:
                        continue  # unhashable: the base class reports it
                    if duplicate:
                        raise ConstructorError("while constructing a mapping", node.start_mark,
                                               f"duplicate key {brief(key)}",
                                               key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return StrictLoader


_LOADER: type | None = None


def parse_yaml(text: str) -> Any:
    """Parse one YAML document with ``yaml.safe_load``'s types, strictly and bounded (see the
    module's docstring); raises :class:`Malformed`."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _strict_loader()
    loader = None
    try:
        loader = _LOADER(text)  # the reader refuses non-printable characters right here
        return loader.get_single_data()
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        line, column = _line_column(text, exc.position)
        raise Malformed(f"unacceptable character #x{code:04x}: {exc.reason}", line,
                        column) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "not valid YAML"
        context = getattr(exc, "context", None)
        if context and problem.startswith("but "):  # "expected a single document ..."
            problem = f"{context}, {problem}"
        if mark is None:
            raise Malformed(problem) from None
        raise Malformed(problem, mark.line + 1, mark.column + 1) from None
    finally:
        if loader is not None:
            loader.dispose()


# ---------------------------------------------------------------------------------------------
# Writing: the cells of Markdown and CSV tables (--format markdown|csv).

# C0 and C1 controls, DEL, the line and paragraph separators, the bidirectional controls
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# what a spreadsheet takes for a formula at the start of a cell (OWASP's CSV injection rule:
# = + - @, and tab and carriage return, which one_line has already escaped)
_FORMULA = ("=", "+", "-", "@")
# a figure (which a spreadsheet should read as one), or the "-" of a figure left out
_FIGURE = re.compile(r"[+-]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?%?|-")


def one_line(text: str) -> str:
    """``text`` on one line, with nothing in it that moves or colours a terminal: each control
    character (``\\n``, ``\\t``, ESC...), line separator and bidirectional control is written
    as its escape (``\\x1b``, ``\\u202e``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def markdown_cell(text: str) -> str:
    """A Markdown table cell: on one line (:func:`one_line`), backslashes and pipes escaped."""
    return one_line(text).replace("\\", "\\\\").replace("|", "\\|")


def csv_cell(text: str) -> str:
    """A CSV cell: on one line (:func:`one_line`); a name that starts with ``= + - @`` (a
    preset named ``=HYPERLINK(...)``) gets a ``'`` before it, so that a spreadsheet shows it
    as text rather than running it (OWASP's rule). Figures are left as they are (``-0.5``)."""
    text = one_line(text)
    if text.startswith(_FORMULA) and not _FIGURE.fullmatch(text):
        return "'" + text
    return text
