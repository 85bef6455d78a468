"""``params --model`` from the Hub by headers (formats/remote.py), against a stand-in Hub on
127.0.0.1 (helpers/hub_server.py, HF_ENDPOINT pointing at it), never the real one: real MiniLM
files, MiniLM in shards, SmolLM2's GGUF, a gated repository, and ones that answer 404 or 500,
redirect forever, lie about a header's length or hang up mid-header. Every count is compared,
byte for byte, with ``params --weights`` on the same local files; the server's log says which
bytes of each weights file were asked for."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
from helpers.hub_server import COMMIT, Hub, Repo, folder_files
from helpers.installed_models import minilm, smollm2

from ffncli.formats.gguf import read_header as gguf_header

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TOKEN = "hf_ThisIsTheSecretToken"
LIAR = struct.pack("<Q", 10_000_000) + b"{}" + bytes(990)  # 1,000 bytes in all


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
