"""TODO: jobs.shards.manifest (from cluster)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffncli.errors import OutputError
from ffncli.jobs.shards.inputs import Shard, TextShard

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "ffncli-run-shards/1"


def _entry(shard: Shard) -> dict[str, Any]:
    return {"name": shard.name, "input": str(shard.path), "tokens": shard.tokens,
            "size": shard.size, "mtime_ns": shard.mtime_ns}


def _jsonable(options: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}


@dataclass(frozen=True)
class ManifestKind:
    """Whose manifest: its format, the command that writes it, the options its recipe holds."""

    format: str
    command: str
    options: str


RUN_MANIFEST = ManifestKind(MANIFEST_FORMAT, "run", "model, overrides, --residual")
CAPTURE_MANIFEST = ManifestKind("ffncli-capture-shards/1", "capture",
                                "model, --layer, --dtype, --text or --ids")


def _manifest_entries(out: Path, recipe: dict[str, Any], kind: ManifestKind = RUN_MANIFEST
                      ) -> dict[str, dict[str, Any]]:
    """The complete shards of an earlier run into ``out`` (none if it has no manifest). One
    made with other options is refused: its outputs are not this run's."""
    from ffncli.base.files import open_file

    path = out / MANIFEST
    if not path.exists():
        if any(out.iterdir()):
            raise OutputError(f"option --out: {out} is not empty and has no {MANIFEST}; "
                              "choose an empty folder or pass --force")
        return {}
    with open_file(path, "manifest", OutputError, 64 * 2**20) as f:
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


def _write_manifest(out: Path, recipe: dict[str, Any], entries: dict[str, dict[str, Any]],
                    kind: ManifestKind = RUN_MANIFEST) -> None:
    from ffncli.base.files import write_text_atomically

    doc = {"format": kind.format, "job": recipe,
           "shards": [entries[k] for k in sorted(entries)]}
    write_text_atomically(out / MANIFEST, json.dumps(doc, indent=1) + "\n", "--out")


def _text_entry(shard: TextShard) -> dict[str, Any]:
    return {"name": shard.name, "input": os.path.abspath(shard.path), "part": shard.part,
            "lines": [shard.lines[0], shard.lines[-1]], "sequences": len(shard.ids),
            "tokens": shard.tokens, "sha256": shard.sha256}
