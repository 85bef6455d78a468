"""A stand-in for the Hugging Face Hub on 127.0.0.1, for ``params --model`` read by headers
(formats/remote.py): the two endpoints ffncli calls, ``/api/models/{repo}/revision/
{rev}`` (the file list and commit) and ``/{repo}/resolve/{rev}/{file}`` (HEAD, GET and GET with
``Range``), for repositories made of real files, plus ones that answer 401, 404 or 500, redirect
forever, or cut a header short, and hostile ones: model info that is not what it should be, an
answer refused with ``Retry-After``, trickled a byte at a time (headers or body), announcing
more than it sends, sending without end, or naming another commit. Every misbehaviour ends
(a trickle after some seconds, an endless body after some MB), so that a client that does not
defend itself fails a test rather than hangs it. Every request is logged (method, path, Range,
Authorization), so a test can assert which bytes of a weights file were asked for."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


@dataclass
class Repo:
    """A repository: its files (name -> bytes), and how it misbehaves: ``status`` answers every
    request with that error (``error_code`` as the Hub's X-Error-Code), unless ``token`` is
    given and sent; ``loop`` files redirect to themselves forever; ``cut`` files stop after that
    many bytes of a range, the connection closed; without ``ranges``, ``Range`` is ignored.

    The hostile ones, each by file name (``API`` for the model info): ``info`` is the model
    info's body as sent, ``sha`` the commit it names; ``answers`` (status, headers) refuse a
    file; ``trickle`` sends an answer's body, ``trickle_head`` its status line and headers, one
    byte each so many seconds; ``announce`` (length, sent) promises a Content-Length and sends
    fewer bytes of spaces; ``endless`` sends that many bytes of spaces with no length, then
    closes; ``commit_header`` is the X-Repo-Commit of a file's answers."""

    files: dict[str, bytes]
    status: int | None = None
    error_code: str | None = None
    token: str | None = None
    loop: tuple[str, ...] = ()
    cut: dict[str, int] = field(default_factory=dict)
    ranges: bool = True  # False: every GET answered whole, Range ignored
    info: bytes | None = None
    sha: str = COMMIT
    answers: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    trickle: dict[str, float] = field(default_factory=dict)
    trickle_head: dict[str, float] = field(default_factory=dict)
    announce: dict[str, tuple[int, int]] = field(default_factory=dict)
    endless: dict[str, int] = field(default_factory=dict)
    commit_header: str | None = None


API = "API"  # the model info, as a key of Repo's hostile behaviours


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


class _Server(ThreadingHTTPServer):
    """A client that stops reading (as ffncli does with an answer past its bound) makes the
    handler's next write fail, maybe once the next test runs: kept in ``hung_up``'s way, never
    printed to a stderr that a test is reading."""

    daemon_threads = True
    dropped: list[str]

    def handle_error(self, request, client_address):  # type: ignore[no-untyped-def]
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a bug of the stand-in: printed
            return
        self.dropped.append(type(error).__name__)


class Hub:
    """The server: ``url`` for HF_ENDPOINT, ``repos`` to serve, ``log`` of requests."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[Request] = []
        self.hung_up: list[str] = []  # paths whose answer the client stopped reading
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.dropped = []
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def requests_of(self, repo: str, file: str) -> list[Request]:
        """The requests of one file, at any revision."""
        return [r for r in self.log if (found := _RESOLVE.fullmatch(r.path)) is not None
                and (found["repo"], found["file"]) == (repo, file)]


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file of a model folder, by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")
_API = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)")


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: the log is hub.log
            pass

        def do_HEAD(self) -> None:
            self.answer(head=True)

        def do_GET(self) -> None:
            self.answer(head=False)

        def answer(self, head: bool) -> None:
            path = urlsplit(self.path).path
            hub.log.append(Request(self.command, path, self.headers.get("Range"),
                                   self.headers.get("Authorization")))
            api, resolve = _API.fullmatch(path), _RESOLVE.fullmatch(path)
            found = api or resolve
            repo = hub.repos.get(found["repo"]) if found else None
            if repo is None:
                return self.send(404, b"", {"X-Error-Code": "RepoNotFound"}, head)
            if repo.status is not None and (
                    repo.token is None
                    or self.headers.get("Authorization") != f"Bearer {repo.token}"):
                headers = {"X-Error-Code": repo.error_code} if repo.error_code else {}
                return self.send(repo.status, b"{}", headers, head)
            if unquote(found["rev"]) not in ("main", COMMIT):
                return self.send(404, b"", {"X-Error-Code": "RevisionNotFound"}, head)
            file = API if api else resolve["file"]
            if file in repo.answers:
                status, headers = repo.answers[file]
                return self.send(status, b"", headers, head)
            if api:
                doc = {"id": found["repo"], "sha": repo.sha,
                       "siblings": [{"rfilename": name} for name in repo.files]}
                body = json.dumps(doc).encode() if repo.info is None else repo.info
                return self.send(200, body, {}, head, file=file, repo=repo)
            if file in repo.loop:
                return self.send(302, b"", {"Location": f"{path}?again"}, head)
            if file not in repo.files:
                return self.send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
            data = repo.files[file]
            meta = {"X-Repo-Commit": repo.commit_header or COMMIT,
                    "ETag": f'"{hashlib.sha1(data).hexdigest()}"', "Accept-Ranges": "bytes"}
            ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if ranged is None or not repo.ranges:
                return self.send(200, data, meta, head, file=file, repo=repo)
            start, end = int(ranged[1]), min(int(ranged[2]), len(data) - 1)
            if start >= len(data):
                return self.send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            meta["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            body = data[start:end + 1]
            if file in repo.cut:  # promise the range, send part of it, hang up
                self.send(206, body, meta, head, send=body[:repo.cut[file]])
                self.close_connection = True
                return None
            return self.send(206, body, meta, head, file=file, repo=repo)

        def send(self, status: int, body: bytes, headers: dict[str, str], head: bool,
                 send: bytes | None = None, file: str = "", repo: Repo | None = None) -> None:
            repo = repo or Repo({})
            length = str(len(body))
            if file in repo.announce:
                length, send = str(repo.announce[file][0]), b" " * repo.announce[file][1]
            if file in repo.endless:  # no length: the body ends when the connection closes
                length, send = "", b" " * repo.endless[file]
                self.close_connection = True
            try:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if length:
                    self.send_header("Content-Length", length)
                if file in repo.trickle_head:
                    self._headers_buffer.append(b"\r\n")
                    self.trickled(b"".join(self._headers_buffer), repo.trickle_head[file])
                    self._headers_buffer = []
                else:
                    self.end_headers()
                if not head:
                    data = body if send is None else send
                    if file in repo.trickle:
                        self.trickled(data, repo.trickle[file])
                    else:
                        for start in range(0, len(data), 1 << 16):
                            self.wfile.write(data[start:start + (1 << 16)])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                hub.hung_up.append(self.path)
                self.close_connection = True

        def trickled(self, data: bytes, pause: float) -> None:
            """Send ``data`` one byte each ``pause`` seconds, for 30 bytes at most (then the
            rest at once, so that the trickle ends)."""
            for i in range(min(len(data), 30)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(pause)
            self.wfile.write(data[30:])

    return Handler
