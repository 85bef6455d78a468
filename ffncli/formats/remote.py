"""``params --model ORG/NAME[@REVISION]`` whose weights are not in the local cache: counted from
the Hub by headers, never downloading a weights file.

``huggingface_hub`` (the optional extra ``ffncli[hub]``) does what is the Hub's: its URL scheme
and ``HF_ENDPOINT``, the token (``HF_TOKEN``), revisions resolved to a commit, redirects, and
errors typed by what went wrong. Here: the repository's file list (one ``model_info`` call),
``config.json`` and a sharded checkpoint's index fetched by ``hf_hub_download`` (into the
cache, as huggingface_hub keeps them: a snapshot holding them and no weights does not count as
cached), and each weights file's header read by HTTP range requests, parsed by the same
parsers as a local file (:mod:`ffncli.formats.sources`): a safetensors file's 8-byte length and
then exactly the header it measures; a GGUF file's first 64 KiB, twice as much each time the
walk needs more (its header's end is known only once it is walked), never past 256 MiB.
Every failure is one :class:`~ffncli.errors.WeightsError` line; the token is never in one.
This module does not import NumPy.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ffncli.errors import WeightsError
from ffncli.formats.gguf import GgufHeader
from ffncli.formats.gguf import parse_header as parse_gguf
from ffncli.formats.hub import cache_dir
from ffncli.formats.safetensors import (
    INDEX_NAME,
    MAX_HEADER,
    SINGLE_NAME,
    Checkpoint,
    Header,
    parse_header,
    parse_index,
)

if TYPE_CHECKING:
    from types import ModuleType

HUB_EXTRA = "pip install 'ffncli[hub]'"
GGUF_FIRST = 1 << 16  # a GGUF header's first read from the Hub; twice as much each time after
GGUF_MAX = 1 << 28  # bytes of a GGUF header read from the Hub, at most (SmolLM2's is 2 MB)
TIMEOUT = 10.0  # seconds a Hub request may wait for an answer
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


def offline() -> bool:
    """``HF_HUB_OFFLINE`` set true, as huggingface_hub reads it (read here at each call)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def huggingface_hub(why: str) -> ModuleType:
    """The ``huggingface_hub`` package, or one line saying how to install it."""
    try:
        import huggingface_hub as hub
    except ImportError:
        raise WeightsError(f"{why}; reading it from the Hub by its headers needs the "
                           f"huggingface_hub package: {HUB_EXTRA}") from None
    return hub


@dataclass(frozen=True)
class HubWeights:
    """A model's weights on the Hub at one commit: which file (a single safetensors file, a
    sharded checkpoint's index, or a GGUF file) and its URL; ``snapshot`` is the cache's
    folder of the commit, where huggingface_hub keeps the config.json and index it fetched
    (the spec is read there, as for a cached model)."""

    repo_id: str
    commit: str
    file: str  # model.safetensors, model.safetensors.index.json or NAME.gguf
    snapshot: Path
    endpoint: str | None

    @property
    def path(self) -> Path:
        """The weights as the count's spec logic sees them: the snapshot folder (its
        config.json beside), or the GGUF file's name in it."""
        return self.snapshot / self.file if self.file.endswith(".gguf") else self.snapshot

    def url(self, file: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, file, revision=self.commit, endpoint=self.endpoint)

    @property
    def name(self) -> str:
        """How the count names the weights: the URL of the file read."""
        return self.url(self.file)

    def checkpoint(self, _: Path | None = None) -> Header:
        """Every tensor of the safetensors checkpoint, from each file's header read by range
        (a sharded one's index, fetched into the cache, names the shards)."""
        if self.file != INDEX_NAME:
            return self._header(self.snapshot / self.file)
        index = self.snapshot / INDEX_NAME
        return Checkpoint(index, index, parse_index(index), reader=self._header).merged()

    def gguf(self, _: Path | None = None) -> GgufHeader:
        """The GGUF file's header, read by range as it is walked."""
        return parse_gguf(RangeReader(self.url(self.file), self.snapshot / self.file,
                                      GGUF_FIRST, GGUF_MAX))

    def _header(self, path: Path) -> Header:
        """The header of the file that ``path`` names in the snapshot, read by range."""
        file = path.relative_to(self.snapshot).as_posix()
        return parse_header(RangeReader(self.url(file), path, 8, 8 + MAX_HEADER))


class RangeReader:
    """A file on the Hub read by HTTP range requests (:class:`ffncli.formats.sources.ByteSource`):
    the first ``first`` bytes when opened (the answer's ``Content-Range`` gives the size), then
    only the bytes asked for, kept; at most ``limit`` bytes in all. An answer that is not a
    range (a server ignoring ``Range``) is refused after its headers, its body never read."""

    growth = 2

    def __init__(self, url: str, path: Path, first: int, limit: int) -> None:
        self.name, self.path, self.first, self.limit = url, path, first, limit
        self.got = b""
        self.size = 0
        self._fetch(0, first)

    def read(self, offset: int, n: int) -> bytes:
        end = min(offset + n, self.size)
        if end > len(self.got):
            if end > self.limit:
                raise WeightsError(f"{self.name}: its header runs past {self.limit:,} bytes, "
                                   "more than ffncli reads from the Hub")
            self._fetch(len(self.got), end - len(self.got))
        return self.got[offset:end]

    def _fetch(self, start: int, n: int) -> None:
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        headers = {**build_hf_headers(), "Range": f"bytes={start}-{start + n - 1}",
                   "Accept-Encoding": "identity"}
        with _mapped(self.name), get_session().stream(
                "GET", self.name, headers=headers, timeout=TIMEOUT, follow_redirects=True) as r:
            hf_raise_for_status(r)
            if r.status_code == 416 and start == 0:  # an empty file
                self.size = 0
                return
            found = _CONTENT_RANGE.fullmatch(r.headers.get("Content-Range", ""))
            if r.status_code != 206 or found is None or int(found[1]) != start:
                raise WeightsError(f"{self.name}: the server answered HTTP {r.status_code} "
                                   "without the byte range asked for; ffncli reads only a "
                                   "weights file's header, by range requests")
            self.size = int(found[3])
            want = min(n, self.size - start)
            data = bytearray()
            for chunk in r.iter_bytes():
                data += chunk
                if len(data) >= want:
                    break
        if len(data) < want:
            raise WeightsError(f"{self.name}: the answer ended after {len(data):,} of the "
                               f"{want:,} bytes asked for (bytes {start:,} on)")
        self.got += bytes(data[:want])


def locate(repo_id: str, revision: str, gguf_file: str | None, why: str) -> HubWeights:
    """``ORG/NAME@REVISION`` on the Hub (``HF_ENDPOINT``): its commit and the weights file to
    count (``gguf_file``; else the safetensors index, else ``model.safetensors``, else the
    repository's only ``.gguf``), with its config.json and index fetched into the cache.
    ``why``: why the cache would not do, said when huggingface_hub is not installed."""
    hub = huggingface_hub(why)
    from huggingface_hub.utils import disable_progress_bars

    endpoint = os.environ.get("HF_ENDPOINT") or None
    with _mapped(repo_id, revision):
        disable_progress_bars()  # hf_hub_download's bars on stderr
        info = hub.HfApi(endpoint=endpoint).model_info(repo_id, revision=revision,
                                                       timeout=TIMEOUT)
    commit = info.sha or revision
    files = sorted(s.rfilename for s in info.siblings or ())
    file = _weights_file(repo_id, revision, files, gguf_file)
    snapshot = cache_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit
    wanted = [name for name in ("config.json", INDEX_NAME) if name in files
              and not file.endswith(".gguf") and (name != INDEX_NAME or file == INDEX_NAME)]
    for name in wanted:
        with _mapped(f"{repo_id}: {name}", revision):
            # by the revision asked for, so that huggingface_hub keeps its refs/ as it does
            snapshot = Path(hub.hf_hub_download(repo_id, name, revision=revision,
                                                cache_dir=cache_dir(), endpoint=endpoint)).parent
    return HubWeights(repo_id, commit, file, snapshot, endpoint)


def _weights_file(repo_id: str, revision: str, files: list[str], gguf_file: str | None) -> str:
    where = f"{repo_id}@{revision} on the Hub"
    if gguf_file is not None:
        if gguf_file not in files:
            ggufs = [f for f in files if f.endswith(".gguf")]
            raise WeightsError(f"option --gguf-file: {where} has no file '{gguf_file}'; its "
                               f".gguf files: {', '.join(ggufs) or 'none'}")
        return gguf_file
    for name in (INDEX_NAME, SINGLE_NAME):
        if name in files:
            return name
    ggufs = [f for f in files if f.endswith(".gguf")]
    if len(ggufs) == 1:
        return ggufs[0]
    if ggufs:
        raise WeightsError(f"{where} has {len(ggufs)} .gguf files ({', '.join(ggufs[:5])}"
                           f"{', ...' if len(ggufs) > 5 else ''}): name one with --gguf-file")
    others = [f for f in files if PurePosixPath(f).suffix in (".bin", ".pt", ".pth")]
    hint = f" (it has {', '.join(others[:3])}: PyTorch pickles, never read)" if others else ""
    raise WeightsError(f"{where} has no {SINGLE_NAME}, {INDEX_NAME} or .gguf file{hint}")


@contextlib.contextmanager
def _mapped(what: str, revision: str | None = None) -> Iterator[None]:
    """huggingface_hub's exceptions (and those of the HTTP library under it) as one line each.
    The messages are ffncli's own: huggingface_hub's run over several lines."""
    from huggingface_hub import errors

    # the HTTP library's root error (httpx's or httpx2's), which HfHubHTTPError derives from
    http: type[Exception] = next((c for c in errors.HfHubHTTPError.__mro__[1:]
                                  if c.__name__ == "HTTPError"), errors.HfHubHTTPError)
    try:
        yield
    except errors.GatedRepoError:
        raise WeightsError(f"{what} is a gated repository: accept its terms on the Hub and "
                           "set HF_TOKEN to a token of the account that did") from None
    except errors.RepositoryNotFoundError:
        raise WeightsError(f"{what}: no such repository on the Hub, or it is private (a token "
                           "that may read it goes in HF_TOKEN)") from None
    except errors.RevisionNotFoundError:
        raise WeightsError(f"{what}: no revision '{revision}' on the Hub") from None
    except errors.EntryNotFoundError:
        raise WeightsError(f"{what}: not found on the Hub") from None
    except errors.OfflineModeIsEnabled:
        raise WeightsError(f"{what}: huggingface_hub is offline (HF_HUB_OFFLINE)") from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise WeightsError(f"{what}: the Hub answered HTTP {status}") from None
    except http as exc:  # no answer: connection refused, timeout, too many redirects
        raise WeightsError(f"{what}: the Hub could not be read ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None
