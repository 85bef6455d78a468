"""The one JSON document a job writes on stdout (``--json``): its ``format`` first, NaN and
infinity as null with a note; and what a writing job over shards wrote, as JSON or a line."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ffncli.jobs.shards.inputs import Skipped


NONFINITE_LISTED = 10  # places of NaN or infinity named in a document's "nonfinite" note
JSON_VERSION = 1  # of every --json document: what may change within it, docs/json.md
JSON_NAMES = ("params", "params-file", "presets", "run", "run-shards", "permute-check",
              "relu-stats", "relu-stats-sweep", "capture", "capture-shards", "perplexity",
              "experts", "neurons")


def json_format(name: str) -> str:
    """The ``format`` a document of kind ``name`` (one of JSON_NAMES) states first:
    ``ffncli-relu-stats/1``."""
    if name not in JSON_NAMES:
        raise ValueError(f"no JSON document is named {name!r}")  # a bug, not the user's
    return f"ffncli-{name}/{JSON_VERSION}"


def emit_json(doc: dict[str, Any], name: str) -> None:
    """One strict JSON document on stdout, its first key ``format`` naming it (see
    :func:`json_format`). NaN and infinity in a result (``--allow-nonfinite``, or an FFN that
    overflowed) are not JSON: each is written as null, and the document gains a ``nonfinite``
    note saying how many there were and where the first are (docs/json.md)."""
    doc = {"format": json_format(name), **doc}
    try:
        text = json.dumps(doc, indent=2, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: rarely, so only then walked
        places: list[dict[str, str]] = []
        clean = _nonfinite_to_null(doc, "", places)
        clean["nonfinite"] = {
            "count": len(places), "first": places[:NONFINITE_LISTED],
            "note": "NaN and infinity are not JSON: each is written as null"}
        text = json.dumps(clean, indent=2, allow_nan=False)
    print(text)


def _nonfinite_to_null(value: Any, path: str, places: list[dict[str, str]]) -> Any:
    """``value`` with every NaN and infinity replaced by None, each place (``output[1][0]``)
    and value (``NaN``, ``Infinity``, ``-Infinity``) appended to ``places``."""
    if isinstance(value, float) and not math.isfinite(value):
        places.append({"path": path, "value": "NaN" if value != value else
                       "Infinity" if value > 0 else "-Infinity"})
        return None
    if isinstance(value, dict):
        return {k: _nonfinite_to_null(v, f"{path}.{k}" if path else str(k), places)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nonfinite_to_null(v, f"{path}[{i}]", places) for i, v in enumerate(value)]
    return value


def emit_written(done: Any, as_json: bool, name: str, fields: dict[str, Any], counted: str,
                 source: str) -> None:
    """What a writing job over shards (``run``, ``capture``) wrote into ``--out``: the
    shards written, those complete from an earlier run, those left out (on stderr).
    ``name``: the JSON document's (``run-shards``); ``fields``: the job's own keys of it;
    ``counted``, ``source``: its words after the token count and after the semicolon of the
    line for people."""
    if as_json:
        emit_json({"out": done.out, "shards": done.shards, "tokens": done.tokens, **fields,
                   "written": done.written, "already_complete": done.already,
                   "skipped": skipped_json(done.skipped)}, name)
    else:
        print(f"{done.out}: {len(done.written):,} shard(s) written, {len(done.already):,} "
              f"already complete, of {done.shards:,} ({done.tokens:,} tokens{counted}); "
              f"{source}")
    print_skipped(done.skipped)


def skipped_json(skipped: Sequence[Skipped]) -> list[dict[str, str]]:
    """The shards a job left out with ``--skip-bad``, for ``--json``."""
    return [dataclasses.asdict(s) for s in skipped]


def print_skipped(skipped: Sequence[Skipped]) -> None:
    """One ``skipped:`` line on stderr per shard left out."""
    for s in skipped:
        print(f"skipped: {s.error}", file=sys.stderr)
