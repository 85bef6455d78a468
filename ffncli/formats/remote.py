"""``params --model ORG/NAME[@REVISION]`` whose weights are not in the local cache: counted from
the Hub by headers, never downloading a weights file.

``huggingface_hub`` (the optional extra ``ffncli[hub]``) gives what is the Hub's: its HTTP
session, the headers it sends (the token, ``HF_TOKEN``), its endpoint (``HF_ENDPOINT``) and its
URL scheme. The conversation itself is ffncli's, so that the Hub cannot steer or hang it: one
:class:`Deadline` for all of it (:data:`DEADLINE`), no retry and no ``Retry-After`` sleep,
every answer read by a bounded reader (refused by its announced size first), and nothing the
Hub says used as a path unchecked (the commit must be 40 hex digits). It asks for the
repository's commit and file list (``/api/models/ORG/NAME/revision/REVISION``), fetches
``config.json`` and a sharded checkpoint's index at that commit into the cache (as
huggingface_hub lays it out; a snapshot holding them and no weights does not count as cached),
and reads each weights file's header by HTTP range requests, parsed by the same parsers as a
local file (:mod:`ffncli.formats.sources`): a safetensors file's 8-byte length and then exactly
the header it measures; a GGUF file's first 64 KiB, twice as much each time the walk needs more
(its header's end is known only once it is walked), never past 256 MiB.
Every failure is one :class:`~ffncli.errors.WeightsError` line; the token is never in one, nor
the user and password of an ``HF_ENDPOINT`` URL. This module does not import NumPy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote, urlsplit

from ffncli.base.signals import signals_held, time_limit
from ffncli.base.textformats import MAX_TEXT_BYTES, Malformed, parse_json
from ffncli.base.validate import PARAMETERS, Words, brief
from ffncli.errors import WeightsError, shown
from ffncli.formats.gguf import GgufHeader
from ffncli.formats.gguf import parse_header as parse_gguf
from ffncli.formats.hub import cache_dir
from ffncli.formats.safetensors import (
    INDEX_NAME,
    MAX_HEADER,
    MAX_INDEX,
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
# Seconds for the whole conversation with the Hub. The longest real one: Llama 3.1 405B's 191
# shards, two range requests each (each redirected to the CDN), some 760 round trips.
DEADLINE = 120.0
TIMEOUT = 10  # seconds a request may wait in silence (HF_HUB_DOWNLOAD_TIMEOUT, huggingface_hub's)
INFO_MAX = 16 * 1024 * 1024  # the model info: a repository of 100,000 files lists ~6 MB
# Shards whose headers are read from the Hub, at most: the largest models have about 200
# (Llama 3.1 405B 191, DeepSeek-V3 163, Kimi K2 about 60); 4,096 leaves room for a 405B model
# saved in 200 MB shards (4,050), and bounds the requests of a hostile index (two per shard).
MAX_SHARDS = 4096
_INT_VARIABLES = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")  # read by its import
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


class Unreachable(WeightsError):
    """The Hub did not answer: no connection, a silence past the timeout, or the deadline
    passed (``params`` then says the model is not cached either)."""


def offline() -> bool:
    """``HF_HUB_OFFLINE`` set true, as huggingface_hub reads it (read here at each call)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def huggingface_hub(why: str) -> ModuleType:
    """The ``huggingface_hub`` package, or one line saying how to install it. The variables
    its import reads as numbers are checked first (``int('abc')`` would fail the import)."""
    for name in _INT_VARIABLES:
        value = os.environ.get(name, "")
        if value and not re.fullmatch(r"\s*[0-9]{1,9}\s*", value):
            raise WeightsError(f"{name}: expected a whole number of seconds, got "
                               f"{brief(value)}")
    try:
        import huggingface_hub as hub
    except ImportError:
        raise WeightsError(f"{why}; reading it from the Hub by its headers needs the "
                           f"huggingface_hub package: {HUB_EXTRA}") from None
    return hub


def public(url: str) -> str:
    """``url`` as ffncli shows it: without a user and password (``http://user:pass@host``)."""
    return _USERINFO.sub("", url)


class Deadline:
    """One deadline for the whole conversation with the Hub: each request waits in silence at
    most :data:`TIMEOUT` seconds and never past the deadline, which is checked between the
    chunks of every answer; in the main thread a timer (SIGALRM) also stops a request that
    trickles its headers. Its passing is one line, :class:`Unreachable`."""

    def __init__(self, seconds: float, silence: float) -> None:
        self.seconds, self.silence = seconds, silence
        self.end = time.monotonic() + seconds

    def line(self, what: str) -> str:
        return (f"{what}: the Hub took longer than the {self.seconds:g} s ffncli gives it for "
                "all of its answers")

    def left(self, what: str) -> float:
        """The seconds left, or :class:`Unreachable` once there are none."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise Unreachable(self.line(what))
        return left

    @contextlib.contextmanager
    def request(self, what: str) -> Iterator[float]:
        """The body makes one request, with the timeout yielded; past the deadline, the timer
        raises :class:`Unreachable` in it wherever it waits (in the main thread)."""
        left = self.left(what)
        with time_limit(left, lambda: Unreachable(self.line(what))):
            yield min(self.silence, left)


class Conversation:
    """The requests of one count to the Hub, through huggingface_hub's session with the
    headers it builds, under one :class:`Deadline`."""

    def __init__(self, endpoint: str, deadline: Deadline) -> None:
        from huggingface_hub.utils import build_hf_headers

        self.endpoint, self.deadline = endpoint, deadline
        self.headers = {**build_hf_headers(), "Accept-Encoding": "identity"}
        for key, value in self.headers.items():
            if not (value.isascii() and value.isprintable()):
                raise WeightsError(_unsendable(key, value))

    @contextlib.contextmanager
    def get(self, url: str, what: str, ok: tuple[int, ...] = (200,), revision: str = "",
            commit: str | None = None, headers: dict[str, str] | None = None
            ) -> Iterator[Any]:
        """The answer to ``GET url``, redirects followed, its status one of ``ok`` (the Hub's
        refusals are one line each) and, from a file's URL at ``commit``, for that commit."""
        from huggingface_hub.utils import get_session

        with _mapped(what, self.deadline), self.deadline.request(what) as timeout, \
                get_session().stream("GET", url, headers={**self.headers, **(headers or {})},
                                     timeout=timeout, follow_redirects=True) as answer:
            if answer.status_code not in ok:
                _refused(answer, what, revision or commit or "")
            said = answer.headers.get("X-Repo-Commit")
            if commit is not None and said is not None and said != commit:
                raise WeightsError(f"{what}: the Hub answered for commit {brief(said)}, "
                                   f"not for {commit}, the commit asked for")
            yield answer

    def read(self, answer: Any, what: str, limit: int) -> bytes:
        """An answer's body, of at most ``limit`` bytes: refused by the size it announces
        before any of it is read, else once more comes; the deadline checked at each chunk."""
        announced = answer.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > limit:
            raise WeightsError(f"{what}: the Hub announces {int(announced):,} bytes; ffncli "
                               f"reads at most {limit:,}")
        data = bytearray()
        for chunk in answer.iter_raw():
            data += chunk
            if len(data) > limit:
                raise WeightsError(f"{what}: the Hub sent more than {limit:,} bytes, the most "
                                   "ffncli reads")
            self.deadline.left(what)
        return bytes(data)

    def fetch(self, url: str, what: str, limit: int, **how: Any) -> bytes:
        """The whole body of ``GET url`` (:meth:`get`, :meth:`read`)."""
        with self.get(url, what, **how) as answer:
            return self.read(answer, what, limit)


def _unsendable(key: str, value: str) -> str:
    """The line for a header value no HTTP header carries (the token never shown)."""
    if key.lower() != "authorization":
        return (f"the {key} header huggingface_hub builds holds a character that is not "
                f"printable ASCII: {shown(value)}")
    source = next((name for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
                   if os.environ.get(name)), "the token file huggingface_hub keeps")
    return (f"the Hub token ({source}) holds a character that is not printable ASCII, which "
            "no HTTP header carries; it was not sent")


def _refused(answer: Any, what: str, revision: str) -> None:
    """An answer that is not the one asked for, as one line (the Hub's ``X-Error-Code`` says
    why); its body is never read."""
    code, status = answer.headers.get("X-Error-Code"), answer.status_code
    if code == "GatedRepo":
        raise WeightsError(f"{what} is a gated repository: accept its terms on the Hub and "
                           "set HF_TOKEN to a token of the account that did")
    if code == "RepoNotFound" or status == 401:
        raise WeightsError(f"{what}: no such repository on the Hub, or it is private (a token "
                           "that may read it goes in HF_TOKEN)")
    if code == "RevisionNotFound":
        raise WeightsError(f"{what}: no revision '{revision}' on the Hub")
    if code == "EntryNotFound":
        raise WeightsError(f"{what}: not found on the Hub")
    raise WeightsError(f"{what}: the Hub answered HTTP {status}")


@dataclass(frozen=True)
class HubWeights:
    """A model's weights on the Hub at one commit: which file (a single safetensors file, a
    sharded checkpoint's index, or a GGUF file) and its URL; ``snapshot`` is the cache's
    folder of the commit, where the config.json and index fetched are kept (the spec is read
    there, as for a cached model)."""

    repo_id: str
    commit: str
    file: str  # model.safetensors, model.safetensors.index.json or NAME.gguf
    snapshot: Path
    hub: Conversation

    @property
    def path(self) -> Path:
        """The weights as the count's spec logic sees them: the snapshot folder (its
        config.json beside), or the GGUF file's name in it."""
        return self.snapshot / self.file if self.file.endswith(".gguf") else self.snapshot

    def url(self, file: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, file, revision=self.commit, endpoint=self.hub.endpoint)

    @property
    def name(self) -> str:
        """How the count names the weights: the URL of the file read."""
        return public(self.url(self.file))

    def checkpoint(self, _: Path | None = None) -> Header:
        """Every tensor of the safetensors checkpoint, from each file's header read by range
        (a sharded one's index, fetched into the cache, names the shards: at most
        :data:`MAX_SHARDS`)."""
        if self.file != INDEX_NAME:
            return self._header(self.snapshot / self.file)
        index = self.snapshot / INDEX_NAME
        shard_of = parse_index(index)
        shards = len(set(shard_of.values()))
        if shards > MAX_SHARDS:
            raise WeightsError(f"{index}: names {shards:,} shard files; ffncli reads the "
                               f"headers of at most {MAX_SHARDS:,} from the Hub (the largest "
                               "models have about 200)")
        return Checkpoint(index, index, shard_of, reader=self._header).merged()

    def gguf(self, _: Path | None = None) -> GgufHeader:
        """The GGUF file's header, read by range as it is walked."""
        return parse_gguf(RangeReader(self, self.file, GGUF_FIRST, GGUF_MAX))

    def _header(self, path: Path) -> Header:
        """The header of the file that ``path`` names in the snapshot, read by range."""
        file = path.relative_to(self.snapshot).as_posix()
        return parse_header(RangeReader(self, file, 8, 8 + MAX_HEADER))


class RangeReader:
    """A file on the Hub read by HTTP range requests (:class:`ffncli.formats.sources.ByteSource`):
    the first ``first`` bytes when opened (the answer's ``Content-Range`` gives the size), then
    only the bytes asked for, kept; at most ``limit`` bytes in all. An answer that is not a
    range (a server ignoring ``Range``) is refused after its headers, its body never read."""

    growth = 2

    def __init__(self, weights: HubWeights, file: str, first: int, limit: int) -> None:
        self.url, self.hub, self.commit = weights.url(file), weights.hub, weights.commit
        self.name, self.path = public(self.url), weights.snapshot / file
        self.first, self.limit = first, limit
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
        ranged = {"Range": f"bytes={start}-{start + n - 1}"}
        with self.hub.get(self.url, self.name, (200, 206, 416), commit=self.commit,
                          headers=ranged) as r:
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
            for chunk in r.iter_raw():
                data += chunk
                if len(data) >= want:
                    break
                self.hub.deadline.left(self.name)
        if len(data) < want:
            raise WeightsError(f"{self.name}: the answer ended after {len(data):,} of the "
                               f"{want:,} bytes asked for (bytes {start:,} on)")
        self.got += bytes(data[:want])


def locate(repo_id: str, revision: str, gguf_file: str | None, why: str,
           words: Words = PARAMETERS) -> HubWeights:
    """``ORG/NAME@REVISION`` on the Hub (``HF_ENDPOINT``): its commit and the weights file to
    count (``gguf_file``; else the safetensors index, else ``model.safetensors``, else the
    repository's only ``.gguf``), with its config.json and index fetched into the cache.
    ``why``: why the cache would not do, said when huggingface_hub is not installed."""
    huggingface_hub(why)
    from huggingface_hub import constants

    hub = Conversation(_endpoint(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT),
                       Deadline(DEADLINE, _silence()))
    commit, files = _model_info(hub, repo_id, revision)
    file = _weights_file(repo_id, revision, files, gguf_file, words)
    folder = cache_dir() / f"models--{repo_id.replace('/', '--')}"
    weights = HubWeights(repo_id, commit, file, folder / "snapshots" / commit, hub)
    wanted = [name for name in ("config.json", INDEX_NAME) if name in files
              and not file.endswith(".gguf") and (name != INDEX_NAME or file == INDEX_NAME)]
    limits = {"config.json": MAX_TEXT_BYTES, INDEX_NAME: MAX_INDEX}
    fetched = {name: hub.fetch(weights.url(name), public(weights.url(name)), limits[name],
                               commit=commit) for name in wanted}
    _keep(folder, commit, revision, fetched)
    return weights


def _endpoint(endpoint: str) -> str:
    """``HF_ENDPOINT`` (else huggingface_hub's default), checked: an http(s) URL with a host
    and, if any, a port of 1-65535."""
    endpoint = endpoint.rstrip("/")
    try:
        parts = urlsplit(endpoint)
        good = parts.scheme in ("http", "https") and bool(parts.hostname) \
            and parts.port != 0 and re.fullmatch(r"[!-~]+", endpoint) is not None
    except ValueError:  # a port out of range, a bad IPv6 address
        good = False
    if not good:
        raise WeightsError(f"HF_ENDPOINT: expected the Hub's URL, http(s)://HOST[:PORT], got "
                           f"'{shown(public(endpoint))}'")
    return endpoint


def _silence() -> float:
    """The seconds a request may wait in silence: ``HF_HUB_DOWNLOAD_TIMEOUT`` (checked by
    :func:`huggingface_hub`), else :data:`TIMEOUT`."""
    return float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT", "").strip() or 0) or TIMEOUT


def _model_info(hub: Conversation, repo_id: str, revision: str) -> tuple[str, list[str]]:
    """The commit a revision is at and the repository's files, from the Hub's model info,
    checked: the commit 40 hex digits (it names a folder of the cache), each file a relative
    path inside the repository."""
    url = f"{hub.endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}"
    body = hub.fetch(url, repo_id, INFO_MAX, revision=revision)
    where = f"{repo_id}: the Hub's model info"
    try:
        info = parse_json(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise WeightsError(f"{where} is not UTF-8 text") from None
    except Malformed as exc:
        raise WeightsError(f"{where} is not valid JSON{exc.where}: {exc.problem}") from None
    if not isinstance(info, dict):
        raise WeightsError(f"{where}: expected a JSON object, got {brief(info)}")
    commit, siblings = info.get("sha"), info.get("siblings")
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise WeightsError(f"{where}: sha: expected a commit id of 40 hex digits, got "
                           f"{brief(commit)}")
    return commit, _files(where, siblings)


def _files(where: str, siblings: object) -> list[str]:
    """The model info's ``siblings``: each a relative path inside the repository, sorted."""
    if not isinstance(siblings, list) or not all(
            isinstance(s, dict) and isinstance(s.get("rfilename"), str) for s in siblings):
        raise WeightsError(f"{where}: siblings: expected a list of files, each with its "
                           f"rfilename, got {brief(siblings)}")
    files = sorted(s["rfilename"] for s in siblings)
    for name in files:
        parts = PurePosixPath(name).parts
        if not name.isprintable() or name.startswith("/") or not parts or ".." in parts:
            raise WeightsError(f"{where}: siblings: {brief(name)} is not a file's path in a "
                               "repository")
    return files


def _keep(folder: Path, commit: str, revision: str, files: dict[str, bytes]) -> None:
    """config.json and the index in the cache as huggingface_hub lays them out: the bytes in
    ``blobs/`` named by their git blob hash (the Hub's ETag of a file outside LFS), a link in
    ``snapshots/COMMIT/``, and ``refs/REVISION`` naming the commit. Each is made beside its
    place and renamed into it, so that a failure or an interrupt leaves no partial file."""
    if not files:
        return
    name = ""
    try:
        for name, data in files.items():
            blob = folder / "blobs" / hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            _renamed(blob, partial(_write, data=data))
            link = folder / "snapshots" / commit / name
            _renamed(link, partial(os.symlink, os.path.relpath(blob, link.parent)))
        if revision != commit:
            name = f"refs/{revision}"
            _renamed(folder / "refs" / revision, partial(_write, data=commit.encode()))
    except OSError as exc:
        raise WeightsError(f"cannot write {name} into the Hugging Face cache at "
                           f"{folder.parent}: {exc.strerror or exc}") from None


def _write(path: str, data: bytes) -> None:
    """A new file ``path`` holding ``data``."""
    with open(path, "xb") as f:
        f.write(data)


def _renamed(path: Path, make: Callable[[str], object]) -> None:
    """``path`` made by ``make(tmp)`` as a hidden file beside it, then renamed over it; the
    hidden file is removed if anything fails on the way (an interrupt too: signals wait while
    it is made, and land once its name is known here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        with signals_held():
            make(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _weights_file(repo_id: str, revision: str, files: list[str], gguf_file: str | None,
                  words: Words) -> str:
    where = f"{repo_id}@{revision} on the Hub"
    ggufs = [f for f in files if f.endswith(".gguf")]
    if gguf_file is not None:
        if gguf_file not in files:
            raise WeightsError(f"{words.where('gguf_file')}: {where} has no file "
                               f"'{gguf_file}'; its .gguf files: {', '.join(ggufs) or 'none'}")
        return gguf_file
    name = next((n for n in (INDEX_NAME, SINGLE_NAME) if n in files), None)
    if name is None and len(ggufs) == 1:
        return ggufs[0]
    if name is None:
        _no_weights_file(where, files, ggufs, words)
    return name


def _no_weights_file(where: str, files: list[str], ggufs: list[str], words: Words
                     ) -> NoReturn:
    """No safetensors: several .gguf files to choose from, or none at all."""
    if ggufs:
        raise WeightsError(f"{where} has {len(ggufs)} .gguf files ({', '.join(ggufs[:5])}"
                           f"{', ...' if len(ggufs) > 5 else ''}): name one with "
                           f"{words.name('gguf_file')}")
    others = [f for f in files if PurePosixPath(f).suffix in (".bin", ".pt", ".pth")]
    hint = f" (it has {', '.join(others[:3])}: PyTorch pickles, never read)" if others else ""
    raise WeightsError(f"{where} has no {SINGLE_NAME}, {INDEX_NAME} or .gguf file{hint}")


@contextlib.contextmanager
def _mapped(what: str, deadline: Deadline) -> Iterator[None]:
    """The HTTP library's exceptions (httpx's or httpx2's, under huggingface_hub) as one line
    each: no answer (a refused connection, a silence, the deadline) is :class:`Unreachable`."""
    from huggingface_hub import errors

    # the HTTP library's root error, which HfHubHTTPError derives from, and its module
    http: type[Exception] = next((c for c in errors.HfHubHTTPError.__mro__[1:]
                                  if c.__name__ == "HTTPError"), errors.HfHubHTTPError)
    library = sys.modules[http.__module__]
    silent = (getattr(library, "TimeoutException", http), getattr(library, "NetworkError", http))
    try:
        yield
    except (http, getattr(library, "InvalidURL", http)) as exc:
        deadline.left(what)  # a timeout at the deadline is the deadline's line
        detail = public(str(exc).splitlines()[0]) if str(exc) else "no detail"
        error = Unreachable if isinstance(exc, silent) else WeightsError
        raise error(f"{what}: the Hub could not be read ({type(exc).__name__}: "
                    f"{shown(detail)})") from None
