"""``--out DIR/manifest.json``: the shards a writing job (``run``, ``capture``) has completed,
with the options it ran with, so that a rerun with the same options skips them.

The format is versioned (``ffncli-run-shards/1``, ``ffncli-capture-shards/1``); a manifest of
another format, or written with other options, is refused with one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ffncli.base.files import open_file, write_text_atomically
from ffncli.errors import OutputError
from ffncli.jobs.shards.inputs import Shard, TextShard

MANIFEST = "manifest.json"
MAX_MANIFEST = 64 * 2**20


@dataclass(frozen=True)
class Kind:
    """Whose manifest: its format, the command that writes it, the options its recipe holds."""

    format: str
    command: str
    options: str


RUN = Kind("ffncli-run-shards/1", "run", "model, overrides, --residual")
CAPTURE = Kind("ffncli-capture-shards/1", "capture", "model, --layer, --dtype, --text or --ids")


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
    made with other options is refused: its outputs are not this run's."""
    path = out / MANIFEST
    if not path.exists():
        if any(out.iterdir()):
            raise OutputError(f"option --out: {out} is not empty and has no {MANIFEST}; "
                              "choose an empty folder or pass --force")
        return {}
    with open_file(path, "manifest", OutputError, MAX_MANIFEST) as f:
        try:
            doc = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise OutputError(f"{path}: not a manifest of ffncli (not JSON); pass --force to "
                              "start again") from None
    if not isinstance(doc, dict) or doc.get("format") != kind.format or \
            not isinstance(doc.get("shards"), list):
        raise OutputError(f"{path}: not a manifest of ffncli {kind.command} (format "
                          f"{kind.format}); pass --force to start again")
    if doc.get("job") != recipe:
        raise OutputError(f"{path}: written by a {kind.command} with other options "
                          f"({kind.options}); pass --force to start again, or choose another "
                          "--out")
    return {e["name"]: e for e in doc["shards"] if isinstance(e, dict) and "name" in e}


def write(out: Path, recipe: dict[str, Any], entries: dict[str, dict[str, Any]],
          kind: Kind) -> None:
    """The manifest, replaced atomically."""
    doc = {"format": kind.format, "job": recipe,
           "shards": [entries[k] for k in sorted(entries)]}
    write_text_atomically(out / MANIFEST, json.dumps(doc, indent=1) + "\n", "--out")
