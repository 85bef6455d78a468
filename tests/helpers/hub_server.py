"""A stand-in for the Hugging Face Hub on 127.0.0.1, for ``params --model`` read by headers
(formats/remote.py): the two endpoints huggingface_hub calls, ``/api/models/{repo}/revision/
{rev}`` (the file list and commit) and ``/{repo}/resolve/{rev}/{file}`` (HEAD, GET and GET with
``Range``), for repositories made of real files, plus ones that answer 401, 404 or 500, redirect
forever, or cut a header short. Every request is logged (method, path, Range, Authorization), so
a test can assert which bytes of a weights file were asked for."""

from __future__ import annotations

import hashlib
import json
import re
import threading
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
    many bytes of a range, the connection closed; without ``ranges``, ``Range`` is ignored."""

    files: dict[str, bytes]
    status: int | None = None
    error_code: str | None = None
    token: str | None = None
    loop: tuple[str, ...] = ()
    cut: dict[str, int] = field(default_factory=dict)
    ranges: bool = True  # False: every GET answered whole, Range ignored


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


class Hub:
    """The server: ``url`` for HF_ENDPOINT, ``repos`` to serve, ``log`` of requests."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[Request] = []
        self.hung_up: list[str] = []  # paths whose answer the client stopped reading
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
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
            if api:
                doc = {"id": found["repo"], "sha": COMMIT,
                       "siblings": [{"rfilename": name} for name in repo.files]}
                return self.send(200, json.dumps(doc).encode(), {}, head)
            file = resolve["file"]
            if file in repo.loop:
                return self.send(302, b"", {"Location": f"{path}?again"}, head)
            if file not in repo.files:
                return self.send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
            data = repo.files[file]
            meta = {"X-Repo-Commit": COMMIT,
                    "ETag": f'"{hashlib.sha1(data).hexdigest()}"', "Accept-Ranges": "bytes"}
            ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if ranged is None or not repo.ranges:
                return self.send(200, data, meta, head)
            start, end = int(ranged[1]), min(int(ranged[2]), len(data) - 1)
            if start >= len(data):
                return self.send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            meta["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            body = data[start:end + 1]
            if file in repo.cut:  # promise the range, send part of it, hang up
                self.send(206, body, meta, head, send=body[:repo.cut[file]])
                self.close_connection = True
                return None
            return self.send(206, body, meta, head)

        def send(self, status: int, body: bytes, headers: dict[str, str], head: bool,
                 send: bytes | None = None) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                if not head:
                    self.wfile.write(body if send is None else send)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                hub.hung_up.append(self.path)
                self.close_connection = True

    return Handler
