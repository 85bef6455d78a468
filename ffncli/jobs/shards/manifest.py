"""``--out DIR/manifest.json``: the shards a writing job (``run``, ``capture``) has completed,
with the options it ran with, so that a rerun with the same options skips them.

The format is versioned (``ffncli-run-shards/1``, ``ffncli-capture-shards/1``); a manifest of
another format, or written with other options, is refused with one line. So is one that is not
what ffncli writes, to the field: it is read with the strict, bounded JSON reader of configs
(no nesting past 64 levels, duplicate keys, NaN, giant integers) and every field of every shard
is checked, so a tampered or damaged manifest is one line, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ffncli.base.files import write_text_atomically
from ffncli.base.textformats import read_json
from ffncli.base.validate import brief
from ffncli.errors import OutputError
from ffncli.jobs.shards.inputs import Shard, TextShard

MANIFEST = "manifest.json"
MAX_MANIFEST = 64 * 2**20


# What a field of a shard's entry holds: a test, and what it expects (for the error line).
Field = tuple[Callable[[Any], bool], str]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_name(value: Any) -> bool:
    """A file or folder name inside --out: not a path, not '.' or '..'."""
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\0" in value:
        return False
    try:
        return len(os.fsencode(value)) <= 255
    except UnicodeEncodeError:  # a lone surrogate no file name decodes to
        return False


_COUNT: Field = (_is_count, "a whole number >= 0")
_NAME: Field = (_is_name, "a file name (not a path, '.' or '..')")
_PATH: Field = (lambda v: isinstance(v, str) and v != "" and "\0" not in v, "a path")
_WHOLE: Field = (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number")
_PART: Field = (lambda v: v is None or _is_count(v), "null or a whole number >= 0")
_LINES: Field = (lambda v: isinstance(v, list) and len(v) == 2 and all(map(_is_count, v))
                 and 1 <= v[0] <= v[1], "[first line, last line], 1 <= first <= last")
_SHA256: Field = (lambda v: isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v) is not None,
                  "64 hexadecimal digits")


@dataclass(frozen=True)
class Kind:
    """Whose manifest: its format, the command that writes it, the options its recipe holds,
    and the fields of a shard's entry."""

    format: str
    command: str
    options: str
    fields: dict[str, Field]


RUN = Kind("ffncli-run-shards/1", "run", "model, overrides, --residual",
           {"name": _NAME, "input": _PATH, "tokens": _COUNT, "size": _COUNT,
            "mtime_ns": _WHOLE})
CAPTURE = Kind("ffncli-capture-shards/1", "capture", "model, --layer, --dtype, --text or --ids",
               {"name": _NAME, "input": _PATH, "part": _PART, "lines": _LINES,
                "sequences": _COUNT, "tokens": _COUNT, "sha256": _SHA256})


def entry(shard: Shard) -> dict[str, Any]:
    """A complete ``run`` shard, as the manifest lists it."""
    return {"name": shard.name, "input": str(shard.path), "tokens": shard.tokens,
            "size": shard.size, "mtime_ns": shard.mtime_ns}


def text_entry(shard: TextShard) -> dict[str, Any]:
    """A complete ``capture`` shard, as the manifest lists it."""
    return {"name": shard.name, "input": os.path.abspath(shard.path), "part": shard.part,
            "lines": [shard.lines[0], shard.lines[-1]], "sequences": len(shard.ids),
            "tokens": shard.tokens, "sha256": shard.sha256}


def jsonable(options: Any) -> dict[str, Any]:
    """A frozen options record as JSON values (paths as strings)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}


def read_entries(out: Path, recipe: dict[str, Any], kind: Kind) -> dict[str, dict[str, Any]]:
    """The complete shards of an earlier run into ``out`` (none if it has no manifest). One
    made with other options is refused: its outputs are not this run's. So is one that is not
    a manifest ffncli writes, field by field."""
    path = out / MANIFEST
    if not path.exists():
        if any(out.iterdir()):
            raise OutputError(f"option --out: {out} is not empty and has no {MANIFEST}; "
                              "choose an empty folder or pass --force")
        return {}
    again = "pass --force to start again"
    doc = read_json(path, "manifest", OutputError, MAX_MANIFEST, kind="a manifest of ffncli",
                    after=f"; {again}")
    if not isinstance(doc, dict) or doc.get("format") != kind.format or \
            not isinstance(doc.get("shards"), list):
        raise OutputError(f"{path}: not a manifest of ffncli {kind.command} (format "
                          f"{kind.format}); {again}")
    unknown = sorted(set(doc) - {"format", "job", "shards"})
    if unknown:
        raise OutputError(f"{path}: unknown key {brief(unknown[0])} in the manifest (its keys: "
                          f"format, job, shards); {again}")
    if doc.get("job") != recipe:
        raise OutputError(f"{path}: written by a {kind.command} with other options "
                          f"({kind.options}); pass --force to start again, or choose another "
                          "--out")
    entries: dict[str, dict[str, Any]] = {}
    for i, e in enumerate(doc["shards"]):
        problem = _entry_problem(e, kind)
        if problem is None and e["name"] in entries:
            problem = f"its name {brief(e['name'])} is that of an earlier shard"
        if problem is not None:
            raise OutputError(f"{path}: shard {i} of the manifest: {problem}; {again}")
        entries[e["name"]] = e
    return entries


def _entry_problem(e: Any, kind: Kind) -> str | None:
    """What is wrong with one shard's entry, or None."""
    if not isinstance(e, dict):
        return f"expected an object, got {brief(e)}"
    for key, (valid, expected) in kind.fields.items():
        if key not in e:
            return f"no {key!r}"
        if not valid(e[key]):
            return f"expected {key!r} to be {expected}, got {brief(e[key])}"
    unknown = sorted(set(e) - set(kind.fields))
    if unknown:
        return f"unknown key {brief(unknown[0])} (its keys: {', '.join(kind.fields)})"
    return None


def write(out: Path, recipe: dict[str, Any], entries: dict[str, dict[str, Any]],
          kind: Kind) -> None:
    """The manifest, replaced atomically."""
    doc = {"format": kind.format, "job": recipe,
           "shards": [entries[k] for k in sorted(entries)]}
    write_text_atomically(out / MANIFEST, json.dumps(doc, indent=1) + "\n", "--out")
