"""``params --model`` from the Hub by headers (formats/remote.py), against a stand-in Hub on
127.0.0.1 (helpers/hub_server.py, HF_ENDPOINT pointing at it), never the real one: real MiniLM
files, MiniLM in shards, SmolLM2's GGUF, a gated repository, and ones that answer 404 or 500,
redirect forever, lie about a header's length or hang up mid-header, and a table of hostile ones
(each bounded in time by a deadline made short here, each leaving no partial file in the cache).
Every count is compared, byte for byte, with ``params --weights`` on the same local files; the
server's log says which bytes of each weights file were asked for."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.hub_server import API, COMMIT, Hub, Repo, folder_files
from helpers.installed_models import minilm, smollm2

from ffncli.formats import remote
from ffncli.formats.gguf import read_header as gguf_header

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TOKEN = "hf_ThisIsTheSecretToken"
LIAR = struct.pack("<Q", 10_000_000) + b"{}" + bytes(990)  # 1,000 bytes in all


ESCAPE = "../../../../outside"  # from snapshots/ of the cache (HF_HOME/hub) to beside HF_HOME
SHARDS = 50_000


def hostile_repos(model: dict[str, bytes]) -> dict[str, Repo]:
    """The hostile repositories, by name: MiniLM's files, served badly."""
    many = json.dumps({"weight_map": {f"t{i}": f"s{i}.safetensors" for i in range(SHARDS)}})
    minimal = {"config.json": model["config.json"], "model.safetensors": model["model.safetensors"]}
    return {
        "acme/html": Repo(model, info=b"<!DOCTYPE html><html><body>Hub</body></html>"),
        "acme/list": Repo(model, info=b'["config.json", "model.safetensors"]'),
        "acme/siblings": Repo(model, info=json.dumps(
            {"sha": COMMIT, "siblings": "model.safetensors"}).encode()),
        "acme/no-sha": Repo(model, info=json.dumps(
            {"siblings": [{"rfilename": "model.safetensors"}]}).encode()),
        "acme/dotdot": Repo({"../x.gguf": b"GGUF"}),
        "acme/escape": Repo({"model.safetensors": model["model.safetensors"]}, sha=ESCAPE),
        "acme/other-commit": Repo(minimal, commit_header="../../../other\x1b"),
        "acme/retry-after": Repo(minimal, answers={
            "config.json": (429, {"Retry-After": "1000000000"})}),
        "acme/unavailable": Repo(minimal, answers={
            "config.json": (503, {"Retry-After": "1000000000"})}),
        "acme/trickle": Repo(minimal, trickle={"config.json": 0.2}),
        "acme/trickle-head": Repo(minimal, trickle_head={API: 0.2}),
        "acme/trickle-range": Repo(minimal, trickle={"model.safetensors": 0.2}),
        "acme/huge-config": Repo(minimal, announce={"config.json": (10**10, 6 << 20)}),
        "acme/endless-config": Repo(minimal, endless={"config.json": 6 << 20}),
        "acme/endless-info": Repo(minimal, endless={API: 20 << 20}),
        "acme/many-shards": Repo({"config.json": model["config.json"],
                                  "model.safetensors.index.json": many.encode()}),
    }


@pytest.fixture(scope="module")
def hub(sharded):
    server = Hub()
    model = folder_files(minilm())
    gguf = smollm2().read_bytes()
    server.repos.update({
        MINILM: Repo(model),
        "acme/minilm-sharded": Repo(folder_files(sharded)),
        "acme/smollm2": Repo({"README.md": b"# SmolLM2\n", "SmolLM2.Q4_1.gguf": gguf}),
        "acme/two-ggufs": Repo({"a.gguf": gguf, "b.gguf": gguf}),
        "acme/gated": Repo(model, status=401, error_code="GatedRepo", token=TOKEN),
        "acme/broken": Repo(model, status=500),
        "acme/loop": Repo(model, loop=("model.safetensors",)),
        "acme/liar": Repo({"config.json": model["config.json"], "model.safetensors": LIAR}),
        "acme/cut": Repo(model, cut={"model.safetensors": 100}),
        "acme/no-ranges": Repo(model, ranges=False),
        "acme/pickles": Repo({"config.json": model["config.json"], "pytorch_model.bin": b"x"}),
        **hostile_repos(model),
    })
    yield server
    server.close()


@pytest.fixture
def online(hub, tmp_path, monkeypatch) -> Path:
    """HF_ENDPOINT at the stand-in, HF_HOME a fresh folder (its hub/ the cache); no token."""
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at import
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    hub.log.clear()
    return tmp_path / "hf"


def url(hub: Hub, repo: str, file: str) -> str:
    return f"{hub.url}/{repo}/resolve/{COMMIT}/{file}"


def one_error(r) -> str:
    """The one ``error:`` line of a failed command, exit 2, nothing on stdout."""
    assert (r.code, r.out) == (2, ""), r.err
    assert r.err.startswith("error: ") and r.err.count("\n") == 1, r.err
    return r.err[len("error: "):-1]


# ---------------------------------------------------------------------------------------------
# The Hub's count is the local files' count, from header bytes only.


@pytest.mark.parametrize("repo, local, file", [
    (MINILM, lambda s: minilm(), "model.safetensors"),
    ("acme/minilm-sharded", lambda s: s, "model.safetensors.index.json"),
    ("acme/smollm2", lambda s: smollm2(), "SmolLM2.Q4_1.gguf"),
])
def test_the_hubs_count_is_the_local_files_byte_for_byte(cli, hub, online, sharded, repo,
                                                         local, file):
    """The JSON documents are the same bytes once the one field naming the weights (the URL
    read; the local path) is swapped."""
    here = cli("params", "--weights", local(sharded), "--json")
    there = cli("params", "--model", repo, "--json")
    assert (there.code, there.err) == (here.code, "")
    name = json.loads(there.out)["weights"]
    assert name == url(hub, repo, file)
    assert there.out.replace(json.dumps(name), json.dumps(str(local(sharded)))) == here.out
    assert json.loads(here.out)["file_params"] > 0


def test_only_each_safetensors_header_is_asked_for(cli, hub, online, sharded):
    """Each weights file: one range of its 8-byte length, one of exactly the header it
    measures; config.json and the index whole, by one GET each (ffncli's bounded reader)."""
    for repo, folder in ((MINILM, minilm()), ("acme/minilm-sharded", sharded)):
        assert cli("params", "--model", repo, "--json").code == 0
        weights = sorted(p.name for p in folder.glob("*.safetensors"))
        assert len(weights) == (1 if repo == MINILM else 3)
        for name in weights:
            (n,) = struct.unpack("<Q", (folder / name).read_bytes()[:8])
            asked = [(r.method, r.range) for r in hub.requests_of(repo, name)]
            assert asked == [("GET", "bytes=0-7"), ("GET", f"bytes=8-{8 + n - 1}")], name
        for name in ("config.json", "model.safetensors.index.json"):
            asked = [(r.method, r.range) for r in hub.requests_of(repo, name)]
            assert asked == ([("GET", None)] if (folder / name).exists()
                             else []), name


def test_a_gguf_header_is_read_in_ranges_that_stop_within_twice_its_length(cli, hub, online):
    assert cli("params", "--model", "acme/smollm2", "--json").code == 0
    asked = [r for r in hub.requests_of("acme/smollm2", "SmolLM2.Q4_1.gguf")]
    spans = [tuple(map(int, r.range.removeprefix("bytes=").split("-"))) for r in asked]
    assert all(r.method == "GET" for r in asked)
    assert spans[0] == (0, 65535)
    assert all(b[0] == a[1] + 1 and b[1] + 1 == 2 * (a[1] + 1)
               for a, b in zip(spans, spans[1:], strict=False))  # contiguous, doubling
    # more was asked for only while the header ran on; the last read, under twice the header
    data_start = min(t.start for t in gguf_header(smollm2()).tensors.values())
    assert spans[-2][1] + 1 < data_start and spans[-1][1] + 1 < 2 * data_start
    assert smollm2().stat().st_size > 40 * (spans[-1][1] + 1)  # a 2 MB header of 100 MB


def test_gguf_file_names_one_of_several(cli, hub, online):
    r = cli("params", "--model", "acme/two-ggufs", "--gguf-file", "b.gguf", "--json")
    assert json.loads(r.out)["weights"] == url(hub, "acme/two-ggufs", "b.gguf")
    assert not hub.requests_of("acme/two-ggufs", "a.gguf")
    assert one_error(cli("params", "--model", "acme/two-ggufs")) == (
        "acme/two-ggufs@main on the Hub has 2 .gguf files (a.gguf, b.gguf): name one with "
        "--gguf-file")
    assert one_error(cli("params", "--model", "acme/two-ggufs", "--gguf-file", "c.gguf")) == (
        "option --gguf-file: acme/two-ggufs@main on the Hub has no file 'c.gguf'; its .gguf "
        "files: a.gguf, b.gguf")
    assert one_error(cli("params", "--weights", smollm2(), "--gguf-file", "a.gguf")) == (
        "option --gguf-file names a file of --model's repository: give --model ORG/NAME (or "
        "the file itself with --weights)")


def test_the_cache_holds_only_what_huggingface_hub_keeps(cli, hub, online):
    """config.json and the index, as huggingface_hub caches them (blobs, snapshot links,
    refs, locks); never a weights file, whose headers were read into memory only."""
    for repo in (MINILM, "acme/minilm-sharded", "acme/smollm2"):
        assert cli("params", "--model", repo).code == 0
    files = sorted(str(p.relative_to(online)) for p in online.rglob("*")
                   if p.is_file() or p.is_symlink())
    snapshots = [f for f in files if "/snapshots/" in f]
    assert snapshots == [
        f"hub/models--acme--minilm-sharded/snapshots/{COMMIT}/config.json",
        f"hub/models--acme--minilm-sharded/snapshots/{COMMIT}/model.safetensors.index.json",
        f"hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/{COMMIT}/config.json",
    ]
    for f in files:
        assert f == "hub/CACHEDIR.TAG" or f.startswith("hub/.locks/") or "/blobs/" in f \
            or f.endswith("/refs/main") or f in snapshots, f
    assert sum((online / f).stat().st_size for f in files) < 100_000
    # what the cache holds does not count as the model cached: it is read from the Hub again
    hub.log.clear()
    assert cli("params", "--model", MINILM).code == 0
    assert [r.range for r in hub.requests_of(MINILM, "model.safetensors")] == [
        "bytes=0-7", "bytes=8-11415"]


# ---------------------------------------------------------------------------------------------
# Offline, without the extra, and the commands that do not read the Hub: one line each.


def test_offline_keeps_to_the_cache_and_says_how_to_allow_the_hub(cli, hub, online,
                                                                   monkeypatch):
    assert cli("params", "--model", MINILM).code == 0  # config.json now in the cache
    hub.log.clear()
    snap = online / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / \
        COMMIT
    assert one_error(cli("params", "--model", MINILM, "--offline")) == (
        f"{MINILM}: the cache's snapshot {snap} holds no weights (model.safetensors, every "
        "shard of model.safetensors.index.json, or one .gguf file); --offline keeps ffncli "
        "off the Hub: without it, params counts the model from the Hub by its headers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert one_error(cli("params", "--model", "acme/smollm2")) == (
        f"acme/smollm2 is not in the Hugging Face cache at {online / 'hub'} (ffncli never "
        f"downloads weights); cached models: {MINILM}; HF_HUB_OFFLINE keeps ffncli off the "
        "Hub: without it, params counts the model from the Hub by its headers")
    assert hub.log == []


def test_without_huggingface_hub_one_line_says_how_to_install_it(cli, hub, online,
                                                                  monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if missing
    assert one_error(cli("params", "--model", MINILM)) == (
        f"{MINILM} is not in the Hugging Face cache at {online / 'hub'} (ffncli never "
        "downloads weights); there is no cache there; reading it from the Hub by its headers "
        "needs the huggingface_hub package: pip install 'ffncli[hub]'")
    assert hub.log == []


def test_other_commands_say_only_params_reads_the_hub(cli, hub, online):
    assert one_error(cli("run", "--model", MINILM, "--random", "2")) == (
        f"{MINILM} is not in the Hugging Face cache at {online / 'hub'} (ffncli never "
        "downloads weights); there is no cache there; only ffncli params reads a model from "
        "the Hub (by its headers)")
    assert hub.log == []


# ---------------------------------------------------------------------------------------------
# The token, and the Hub's refusals: one line, exit 2, the token never shown.


def test_a_gated_repository_needs_hf_token_which_is_sent_and_never_shown(cli, hub, online,
                                                                         monkeypatch):
    assert one_error(cli("params", "--model", "acme/gated")) == (
        "acme/gated is a gated repository: accept its terms on the Hub and set HF_TOKEN to a "
        "token of the account that did")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.log.clear()
    r = cli("params", "--model", "acme/gated", "--json")
    assert (r.code, r.err) == (0, "")
    assert json.loads(r.out)["file_params"] == json.loads(
        cli("params", "--weights", minilm(), "--json").out)["file_params"]
    assert {req.authorization for req in hub.log} == {f"Bearer {TOKEN}"}
    assert [req.range for req in hub.requests_of("acme/gated", "model.safetensors")] == [
        "bytes=0-7", "bytes=8-11415"]
    monkeypatch.setenv("HF_TOKEN", TOKEN + "x")  # a token the repository refuses
    r = cli("params", "--model", "acme/gated")
    assert TOKEN not in r.out + r.err and one_error(r).startswith("acme/gated is a gated")


def test_bad_hubs_and_bad_headers_are_one_line(cli, hub, online):
    hub.hung_up.clear()
    cases = {
        "acme/nope": "acme/nope: no such repository on the Hub, or it is private (a token "
                     "that may read it goes in HF_TOKEN)",
        f"{MINILM}@v9": f"{MINILM}: no revision 'v9' on the Hub",
        "acme/broken": "acme/broken: the Hub answered HTTP 500",
        "acme/loop": f"{url(hub, 'acme/loop', 'model.safetensors')}: the Hub could not be read "
                     "(TooManyRedirects: Exceeded maximum allowed redirects.)",
        "acme/liar": f"{url(hub, 'acme/liar', 'model.safetensors')}: not a safetensors file "
                     "(header length 10,000,000 runs past the end of the file, 1,000 bytes)",
        "acme/no-ranges": f"{url(hub, 'acme/no-ranges', 'model.safetensors')}: the server "
                          "answered HTTP 200 without the byte range asked for; ffncli reads "
                          "only a weights file's header, by range requests",
        "acme/pickles": "acme/pickles@main on the Hub has no model.safetensors, "
                        "model.safetensors.index.json or .gguf file (it has pytorch_model.bin: "
                        "PyTorch pickles, never read)",
    }
    for model, line in cases.items():
        assert one_error(cli("params", "--model", model)) == line, model
    cut = one_error(cli("params", "--model", "acme/cut"))
    assert cut.startswith(f"{url(hub, 'acme/cut', 'model.safetensors')}: the Hub could not be "
                          "read (RemoteProtocolError: "), cut
    whole = f"/acme/no-ranges/resolve/{COMMIT}/model.safetensors"
    assert len(minilm().joinpath("model.safetensors").read_bytes()) > 20_000_000
    assert hub.hung_up == [whole]  # 90 MB offered whole, and left unread
    loops = hub.requests_of("acme/loop", "model.safetensors")
    assert 1 < len(loops) <= 21  # the redirects are bounded
    assert not hub.requests_of("acme/liar", "config.json")[2:]  # nothing read twice


def test_never_the_real_hub(online):
    assert os.environ["HF_ENDPOINT"].startswith("http://127.0.0.1:")


def test_counting_from_the_hub_never_imports_numpy(hub, online):
    """In a process of its own, where huggingface_hub reads HF_ENDPOINT at import as it does
    for a user: params from the Hub, and NumPy never loaded."""
    from test_startup import probe

    for repo in (MINILM, "acme/smollm2"):
        result = probe("params", "--model", repo, "--json")
        assert (result["numpy_after"], result["code"]) == (False, 0), repo


# ---------------------------------------------------------------------------------------------
# The Hub cannot steer or hang ffncli: a table of hostile answers and settings, each one line,
# exit 2, within a deadline made short here, and no partial file left in the cache.

DEADLINE = 1.0  # seconds (120 by default): each trickle lasts 6 s, then would succeed


@pytest.fixture
def hostile(hub, online, monkeypatch) -> Iterator[Path]:
    """``online`` with the deadline made short; afterwards, the cache holds whole files only:
    no temporary or partial one, each blob a file the Hub holds, each snapshot file a link to
    a blob, each ref the commit."""
    monkeypatch.setattr(remote, "DEADLINE", DEADLINE)
    yield online
    served = {data for repo in hub.repos.values() for data in repo.files.values()}
    for path in (online / "hub").rglob("*"):
        assert not path.name.endswith((".tmp", ".incomplete", ".lock")), path
        if path.parent.name == "blobs":
            assert path.read_bytes() in served, path
        if "snapshots" in path.parts and not path.is_dir():
            assert path.is_symlink() and path.resolve().parent.name == "blobs", path
        if "refs" in path.parts and path.is_file():
            assert path.read_text() == COMMIT, path


LATE = "the Hub took longer than the 1 s ffncli gives it for all of its answers"
INFO = "the Hub's model info"
# a model not cached whose Hub does not answer in time (or at all): the line says both
NOT_CACHED = ("{model} is not in the Hugging Face cache at {cache} (ffncli never downloads "
              "weights); there is no cache there; nor could it be counted from the Hub: ")
OFFLINE = "; --offline keeps params to the cache"
HOSTILE = {  # model: its line; {url}: the URL of the repository's files at the commit
    "acme/html": f"acme/html: {INFO} is not valid JSON at line 1, column 1: Expecting value",
    "acme/list": f"acme/list: {INFO}: expected a JSON object, got ['config.json', "
                 "'model.safetensors']",
    "acme/siblings": f"acme/siblings: {INFO}: siblings: expected a list of files, each with its "
                     "rfilename, got 'model.safetensors'",
    "acme/no-sha": f"acme/no-sha: {INFO}: sha: expected a commit id of 40 hex digits, got None",
    "acme/dotdot": f"acme/dotdot: {INFO}: siblings: '../x.gguf' is not a file's path in a "
                   "repository",
    "acme/other-commit": "{url}config.json: the Hub answered for commit '../../../other\\x1b', "
                         f"not for {COMMIT}, the commit asked for",
    "acme/retry-after": "{url}config.json: the Hub answered HTTP 429",
    "acme/unavailable": "{url}config.json: the Hub answered HTTP 503",
    "acme/trickle": NOT_CACHED + "{url}config.json: " + LATE + OFFLINE,
    "acme/trickle-head": NOT_CACHED + "acme/trickle-head: " + LATE + OFFLINE,
    "acme/trickle-range": "{url}model.safetensors: " + LATE,
    "acme/huge-config": "{url}config.json: the Hub announces 10,000,000,000 bytes; ffncli "
                        "reads at most 4,194,304",
    "acme/endless-config": "{url}config.json: the Hub sent more than 4,194,304 bytes, the "
                           "most ffncli reads",
    "acme/endless-info": "acme/endless-info: the Hub sent more than 16,777,216 bytes, the most "
                         "ffncli reads",
    "acme/many-shards": "{cache}/models--acme--many-shards/snapshots/" + COMMIT +
                        "/model.safetensors.index.json: names 50,000 shard files; ffncli reads "
                        "the headers of at most 4,096 from the Hub (the largest models have "
                        "about 200)",
}


@pytest.mark.parametrize("model", HOSTILE)
def test_a_hostile_hub_is_one_line_within_the_deadline(cli, hub, hostile, model):
    line = HOSTILE[model].format(model=model, url=url(hub, model, ""), cache=hostile / "hub")
    assert one_error(cli("params", "--model", model)) == line
    for name in ("config.json", "model.safetensors.index.json"):  # no retry, no HEAD first
        assert len(hub.requests_of(model, name)) <= 1
    assert not any(r.range is None for r in hub.requests_of(model, "model.safetensors"))


def test_the_commit_is_never_a_path_out_of_the_cache(cli, hub, hostile, monkeypatch):
    """A commit id (sha) that climbs out of snapshots/ to a folder holding a config.json: it
    is refused, and no file outside the cache is read."""
    outside = hostile.parent / "outside"
    outside.mkdir()
    (outside / "config.json").write_bytes(minilm().joinpath("config.json").read_bytes())
    from ffncli.base import textformats

    read: list[Path] = []
    real = textformats.read_text
    monkeypatch.setattr(textformats, "read_text",
                        lambda path, *a, **k: read.append(Path(path)) or real(path, *a, **k))
    assert one_error(cli("params", "--model", "acme/escape")) == (
        f"acme/escape: {INFO}: sha: expected a commit id of 40 hex digits, got '{ESCAPE}'")
    assert read == [] and hub.requests_of("acme/escape", "model.safetensors") == []
    assert not (hostile / "hub" / "models--acme--escape").exists()


BAD_ENDPOINT = "HF_ENDPOINT: expected the Hub's URL, http(s)://HOST[:PORT], got "
BAD_TOKEN = ("the Hub token (HF_TOKEN) holds a character that is not printable ASCII, which no "
             "HTTP header carries; it was not sent")


@pytest.mark.parametrize("name, value, line", [
    ("HF_ENDPOINT", "not a url", BAD_ENDPOINT + "'not a url'"),
    ("HF_ENDPOINT", "http://127.0.0.1:99999", BAD_ENDPOINT + "'http://127.0.0.1:99999'"),
    ("HF_ENDPOINT", "http://user:secret@127.0.0.1:0", BAD_ENDPOINT + "'http://127.0.0.1:0'"),
    ("HF_ENDPOINT", "ftp://127.0.0.1", BAD_ENDPOINT + "'ftp://127.0.0.1'"),
    ("HF_ENDPOINT", "http://exa mple.org", BAD_ENDPOINT + "'http://exa mple.org'"),
    ("HF_HUB_DOWNLOAD_TIMEOUT", "abc",
     "HF_HUB_DOWNLOAD_TIMEOUT: expected a whole number of seconds, got 'abc'"),
    ("HF_HUB_ETAG_TIMEOUT", "1.5", "HF_HUB_ETAG_TIMEOUT: expected a whole number of seconds, "
                                   "got '1.5'"),
    ("HF_TOKEN", "hf_s\u00e9cret", BAD_TOKEN),
    ("HF_TOKEN", "hf_se\x7fcret", BAD_TOKEN),
])
def test_bad_settings_are_one_line_before_any_request(cli, hub, hostile, monkeypatch, name,
                                                      value, line):
    monkeypatch.setenv(name, value)
    r = cli("params", "--model", MINILM)
    assert one_error(r) == line and "secret" not in r.err
    assert hub.log == []


def test_a_cache_that_is_a_file_is_one_line(cli, hub, hostile, monkeypatch):
    (hostile.parent / "cache").write_text("not a folder\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(hostile.parent / "cache"))
    for command in (("params", "--model", MINILM), ("run", "--model", MINILM, "--random", "1")):
        assert one_error(cli(*command)) == (
            f"the Hugging Face cache {hostile.parent / 'cache'} is not a folder (HF_HUB_CACHE "
            "names it, else HF_HOME/hub)")
    assert hub.log == []
    monkeypatch.setenv("HF_HUB_CACHE", str(hostile.parent / "cache" / "hub"))  # in a file
    assert one_error(cli("params", "--model", MINILM)) == (
        f"cannot write config.json into the Hugging Face cache at {hostile.parent / 'cache'}"
        "/hub: Not a directory")


def test_a_silent_hub_stops_at_the_deadline_or_the_timeout(cli, hub, hostile, monkeypatch):
    """A Hub that accepts the connection and never answers: the request stops at the deadline
    when that comes first, else at HF_HUB_DOWNLOAD_TIMEOUT's seconds; either is one line that
    also says the model is not cached."""
    start = NOT_CACHED.format(model="acme/x", cache=hostile / "hub")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert one_error(cli("params", "--model", "acme/x")) == f"{start}acme/x: {LATE}{OFFLINE}"
        monkeypatch.setattr(remote, "DEADLINE", 30.0)
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
        assert one_error(cli("params", "--model", "acme/x")) == (
            f"{start}acme/x: the Hub could not be read (ReadTimeout: timed out){OFFLINE}")


def test_not_cached_and_the_hub_unreachable_says_both(cli, hub, hostile, monkeypatch):
    assert cli("params", "--model", MINILM).code == 0  # the cache now holds its config.json
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert one_error(cli("params", "--model", "acme/smollm2")) == (
        f"acme/smollm2 is not in the Hugging Face cache at {hostile / 'hub'} (ffncli never "
        f"downloads weights); cached models: {MINILM}; nor could it be counted from the Hub: "
        "acme/smollm2: the Hub could not be read (ConnectError: [Errno 111] Connection "
        f"refused){OFFLINE}")


def test_the_user_and_password_of_hf_endpoint_are_never_shown(cli, hub, hostile, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url.replace("://", "://user:secret@"))
    r = cli("params", "--model", MINILM, "--json")
    assert (r.code, r.err) == (0, "")
    assert json.loads(r.out)["weights"] == url(hub, MINILM, "model.safetensors")
    r = cli("params", "--model", MINILM)
    assert r.code == 0 and f"weights: {url(hub, MINILM, 'model.safetensors')}" in r.out
    shown = r.out
    for model in ("acme/other-commit", "acme/trickle-range", "acme/broken"):
        r = cli("params", "--model", model)
        assert one_error(r) == HOSTILE.get(model, "acme/broken: the Hub answered HTTP 500").format(
            url=url(hub, model, ""), cache=hostile / "hub")
        shown += r.err
    assert "secret" not in shown
