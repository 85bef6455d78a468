"""``--model ORG/NAME[@REVISION]``: a model in the local Hugging Face cache, never the network
(``params`` counts one that is not cached from the Hub by its headers: ``formats/remote.py``).

The cache is the one ``huggingface_hub`` fills (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``). A model lives in ``models--ORG--NAME/``: ``refs/<revision>``
files hold commit hashes, and ``snapshots/<commit>/`` holds that commit's files (links into
``blobs/``). This module does not import NumPy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ffncli.base.files import reading
from ffncli.base.textformats import read_text
from ffncli.base.validate import PARAMETERS, Words
from ffncli.errors import WeightsError
from ffncli.formats.safetensors import INDEX_NAME, SINGLE_NAME, parse_index

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REVISION = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
_SHOWN = 20  # cached models named in an error, at most


class NotCached(WeightsError):
    """The model, its revision or its weights are not in the cache (``params`` may read them
    from the Hub instead; the cache's own faults, a bad ref file, are plain WeightsErrors)."""


def cache_dir() -> Path:
    """Where the Hugging Face cache is: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``~/.cache/huggingface/hub`` (as ``huggingface_hub`` decides)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def cached_models(cache: Path) -> list[str]:
    """The model ids the cache holds (``ORG/NAME``), sorted."""
    with reading(cache, "Hugging Face cache", WeightsError):
        folders = [p.name for p in cache.iterdir()] if cache.is_dir() else []
    return sorted("/".join(name.split("--")[1:]) for name in folders
                  if name.startswith("models--"))


def _local_hint(model: str, words: Words) -> str:
    """The end of an error line when ``model`` is also a local folder (a model folder given to
    the wrong option, or an ORG/NAME that a clone of the repository shares)."""
    return f"; a local folder goes to {words.name('weights')}" if os.path.isdir(model) else ""


def parse_model(model: str, words: Words = PARAMETERS) -> tuple[str, str]:
    """``ORG/NAME[@REVISION]`` as ``(ORG/NAME, REVISION)``, the revision ``main`` by default;
    errors name ``model`` (and ``weights``) in ``words`` (a command's: ``option --model``)."""
    where, name = words.where("model"), words.name("model")
    if os.path.isfile(model):  # never a model's id: a checkpoint or config the user has
        raise WeightsError(f"{where}: '{model}' is a local file; give it as "
                           f"{words.name('weights')} ({name} names a model in the Hugging Face "
                           "cache or on the Hub, ORG/NAME[@REVISION])")
    repo_id, _, revision = model.partition("@")
    if not _REPO_ID.fullmatch(repo_id) or (revision == "" and "@" in model):
        raise WeightsError(f"{where}: expected ORG/NAME or ORG/NAME@REVISION, got "
                           f"'{model}'{_local_hint(model, words)}")
    revision = revision or "main"
    if not _REVISION.fullmatch(revision) or ".." in revision.split("/"):
        raise WeightsError(f"{where}: revision '{revision}' is not a branch, tag or "
                           "commit name")
    return repo_id, revision


def cached_weights(model: str, gguf_file: str | None = None, words: Words = PARAMETERS
                   ) -> Path:
    """The weights of ``ORG/NAME[@REVISION]`` in the cache: its snapshot folder when that
    holds a ``model.safetensors``, or an index and every shard it names; else the .gguf file
    ``gguf_file`` names, or the folder's only one. A snapshot without them (huggingface_hub
    keeps the config.json and index that ``params`` fetched from the Hub) is not cached.
    ``words`` name ``model`` and ``weights`` in errors."""
    folder = snapshot(model, words)
    if gguf_file is not None:
        if os.path.isfile(folder / gguf_file):
            return folder / gguf_file
        raise NotCached(f"{model}: the cache's snapshot {folder} has no file '{gguf_file}'")
    index = folder / INDEX_NAME
    if os.path.isfile(folder / SINGLE_NAME) or (os.path.isfile(index) and all(
            os.path.isfile(shard) for shard in set(parse_index(index).values()))):
        return folder
    with reading(folder, "snapshot folder", WeightsError):
        ggufs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf")
    if len(ggufs) == 1 and not os.path.lexists(index):
        return ggufs[0]
    raise NotCached(f"{model}: the cache's snapshot {folder} holds no weights "
                    f"({SINGLE_NAME}, every shard of {INDEX_NAME}, or one .gguf file)")


def snapshot(model: str, words: Words = PARAMETERS) -> Path:
    """The snapshot folder of ``ORG/NAME[@REVISION]`` in the cache: the commit that
    ``refs/REVISION`` (default ``main``) names, or REVISION itself when it is a commit hash."""
    repo_id, revision = parse_model(model, words)
    cache = cache_dir()
    if os.path.exists(cache) and not os.path.isdir(cache):
        raise WeightsError(f"the Hugging Face cache {cache} is not a folder (HF_HUB_CACHE "
                           "names it, else HF_HOME/hub)")
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    with reading(folder, "Hugging Face cache folder", WeightsError):
        cached = folder.is_dir()
    if not cached:
        raise NotCached(f"{repo_id} is not in the Hugging Face cache at {cache} (ffncli "
                        f"never downloads weights); {_listing(cache)}{_local_hint(repo_id, words)}")
    snapshots = folder / "snapshots"
    with reading(snapshots, "snapshots folder", WeightsError):
        commits = sorted(p.name for p in snapshots.iterdir()) if snapshots.is_dir() else []
    if not commits:
        raise NotCached(f"{folder}: no snapshots in it (an interrupted download?)")
    commit = _commit(repo_id, folder, revision, commits)
    if commit not in commits:
        named = "" if commit == revision else f" (commit {commit})"
        raise NotCached(f"{repo_id}: revision '{revision}'{named} is not in the cache; "
                           f"cached snapshots: {', '.join(commits)}")
    return snapshots / commit


def _commit(repo_id: str, folder: Path, revision: str, commits: list[str]) -> str:
    """The commit a revision means: the hash in ``refs/<revision>``, else the revision itself
    when it is a commit hash, or the start of one (7 digits or more) that one snapshot has."""
    ref = folder / "refs" / revision
    if ref.is_file():
        return _read_ref(ref)
    if _COMMIT.fullmatch(revision):
        return revision
    if re.fullmatch(r"[0-9a-f]{7,39}", revision):
        hits = [c for c in commits if c.startswith(revision)]
        if len(hits) == 1:
            return hits[0]
    refs_dir = folder / "refs"
    with reading(refs_dir, "refs folder", WeightsError):
        refs = sorted(str(p.relative_to(refs_dir)) for p in refs_dir.rglob("*")
                      if p.is_file()) if refs_dir.is_dir() else []
    raise NotCached(f"{repo_id}: no revision '{revision}' in the cache (refs: "
                       f"{', '.join(refs) or 'none'}; snapshots: {', '.join(commits)})")


def _read_ref(ref: Path) -> str:
    """The commit hash a ``refs/`` file holds."""
    commit = read_text(ref, "cache ref", WeightsError, 1024).strip()
    if not _COMMIT.fullmatch(commit):
        raise WeightsError(f"{ref}: expected a 40-digit commit hash, got '{commit[:50]}'")
    return commit


def _listing(cache: Path) -> str:
    models = cached_models(cache)
    if not models:
        return "it holds no models" if cache.is_dir() else "there is no cache there"
    more = f", and {len(models) - _SHOWN} more" if len(models) > _SHOWN else ""
    return f"cached models: {', '.join(models[:_SHOWN])}{more}"
