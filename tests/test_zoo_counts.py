"""ffncli against the zoo (tests/data/zoo/, what transformers 5.25 builds on the meta device):
every type and flagship ffncli reads, counted exactly: the total, the active parameters per
token and, for a decoder, each layer's FFN (experts, shared experts and router included, by
make_zoo.py's FFN rule). The count of exact types is generated and pinned below.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import DATA

import ffncli
from ffncli.errors import FfnError
from ffncli.specs.refused import LACKS
from ffncli.specs.table import SUPPORTED_MODEL_TYPES

ZOO = DATA / "zoo"
DOC = json.loads((ZOO / "truths.json").read_text())
ENTRIES = {**DOC["types"], **{f"flagship:{n}": e for n, e in DOC["flagships"].items()}}
# The text model types of the three mappings (a seq2seq type with an audio or vision part is
# not one: its text backbone is counted under its own type).
MAPPED = sorted(t for t in set().union(*DOC["mappings"].values())
                if DOC["types"][t].get("text") is not False)


def _build(e):
    """The class ffncli counts (test_zoo_reference's _kind): a masked-LM type's bare model, a
    seq2seq type's seq2seq class, else the causal LM."""
    kind = next(k for k in ("base", "seq2seq_lm", "causal_lm") if k in e["builds"])
    return e["builds"][kind]


# Keys a type's defaults leave null that the model needs to run, and ffncli to count the
# active parameters (transformers' DeepseekV2 cannot route without them; its truth has no
# active figure): the published value, the rest at the defaults.
COMPLETED = {"deepseek_v2": {"num_experts_per_tok": 6}}


def _spec(e, tmp=None):
    path = ZOO / e["config"]
    if e.get("model_type") in COMPLETED and tmp is not None:
        config = {**json.loads(path.read_text()), **COMPLETED[e["model_type"]]}
        path = tmp / f"{e['model_type']}.config.json"
        path.write_text(json.dumps(config))
    try:
        return ffncli.load_spec(config=path)
    except FfnError:
        return None


def _decoder_stack(build, spec):
    """The truth's decoder stack: the language model's layers of a multimodal model."""
    n = spec.layers.decoder
    stacks = {p: s for p, s in build["stacks"].items() if len(s["ffn"]) == n}
    if not stacks and sum(len(s["ffn"]) for s in build["stacks"].values()) == n:
        # one decoder in several stacks (HRM-Text's L and H modules), in order
        return {key: [x for s in build["stacks"].values() for x in s[key]]
                for key in ("params", "ffn")}
    text = [p for p in stacks if "language_model" in p or "text" in p]
    return stacks[text[0]] if text else next(iter(stacks.values()))


def _parts(e, spec):
    """What ffncli's count must equal: total and active, and each decoder layer's FFN; a
    multimodal config counted as its language model alone: its layers and its head (the
    truth's embeddings also hold the vision tower's position table)."""
    truth, counted = _build(e), ffncli.count(spec)
    if spec.uncounted:
        stack = _decoder_stack(truth, spec)
        at = {i: layer.total for layer in counted.layers for i in layer.indices}
        mine = (tuple(at[i] for i in sorted(at)), counted.groups["head"])
        return mine, (tuple(stack["params"]), truth["parts"]["head"]), counted.decoder_ffn(), \
            tuple(stack["ffn"])
    active = counted.active if truth["active"] is None else truth["active"]  # not measured
    mine, want = (counted.total, counted.active), (truth["total"], active)
    if spec.layers.encoder or spec.ffn_only:
        return mine, want, (), ()
    return mine, want, counted.decoder_ffn(), tuple(_decoder_stack(truth, spec)["ffn"])


def _exact(name, tmp):
    e = ENTRIES[name]
    if _build(e)["status"] != "built" or e["config"].startswith("failed"):
        return False
    spec = _spec(e, tmp)
    if spec is None:
        return False
    mine, want, ffn, want_ffn = _parts(e, spec)
    return mine == want and ffn == want_ffn


READ = sorted(n for n, e in ENTRIES.items() if not e["config"].startswith("failed")
              and _build(e)["status"] == "built"
              and (_spec(e) is not None or e.get("model_type") in COMPLETED))


@pytest.mark.parametrize("name", READ)
def test_every_config_ffncli_reads_is_counted_exactly(name, tmp_path):
    mine, want, ffn, want_ffn = _parts(ENTRIES[name], _spec(ENTRIES[name], tmp_path))
    assert mine == want
    assert ffn == want_ffn


# The generated figure of issue 40: types of the three mappings counted exactly on their
# defaults (total, active and each layer's FFN). A type added raises it; lower it never.
EXACT_TYPES = 231


def test_n_of_m_types_exact(capsys, tmp_path):
    exact = [t for t in MAPPED if _exact(t, tmp_path)]
    flagships = [n for n in ENTRIES if n.startswith("flagship:") and _exact(n, tmp_path)]
    with capsys.disabled():
        print(f"\nzoo: {len(exact)} of {len(MAPPED)} types exact, {len(flagships)} of "
              f"{len(DOC['flagships'])} flagships (transformers {DOC['transformers']})")
    assert len(exact) == EXACT_TYPES


def test_a_multimodal_config_counts_its_language_model_and_says_so(cli):
    """Gemma 3: the text_config's model with its FFN breakdown; the SigLIP tower named."""
    path = ZOO / "configs" / "gemma3.config.json"
    r = cli("params", "--config", path, "--json")
    doc = json.loads(r.out)
    assert r.code == 0 and doc["uncounted"] == [
        "vision tower (siglip_vision_model)", "what joins them to the language model"]
    text = ffncli.count(ffncli.load_spec(config=ZOO / "configs" / "gemma3_text.config.json"))
    assert doc["total_params"] == text.total
    assert [(x["kind"], x["count"], x["mixer"], x["window"]) for x in doc["layers"]] == [
        ("sliding decoder", 22, "sliding", 4096), ("decoder", 4, "full", 0)]
    out = cli("params", "--config", path).out
    assert "counted: the language model only; not counted: vision tower (siglip_vision_model)" \
        ", what joins them to the language model\n" in out
    assert "total (language model only)" in out and "layers 5, 11, 17, 23\n" in out


def test_a_pattern_groups_layers_by_kind_and_names_them(cli):
    """gpt-oss: sliding and full layers alternate; both hold the MoE FFN and attention sinks."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "gpt_oss.config.json",
                         "--json").out)
    sliding, full = doc["layers"]
    assert (sliding["kind"], sliding["indices"], sliding["window"]) == (
        "sliding decoder", list(range(0, 36, 2)), 128)
    assert (full["kind"], full["indices"], full["mixer"]) == ("decoder", list(range(1, 36, 2)),
                                                              "full")
    assert {"name": "sinks", "shape": "64", "params": 64} in full["attention_rows"]
    assert doc["total_params"] == DOC["types"]["gpt_oss"]["builds"]["causal_lm"]["total"]


@pytest.mark.parametrize("name", sorted(t for t, e in DOC["types"].items()
                                        if not e["config"].startswith("failed")
                                        and t not in SUPPORTED_MODEL_TYPES))
def test_a_type_still_refused_says_what_ffncli_lacks(cli, name):
    path = ZOO / DOC["types"][name]["config"]
    r = cli("params", "--config", path)
    model_type = json.loads(path.read_text())["model_type"]  # gpt-sw3's config is gpt2's
    if model_type in SUPPORTED_MODEL_TYPES:
        return
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {path}: unsupported model_type '{model_type}': ffncli lacks "
                     f"{LACKS[model_type]}\n")


# --- the KV cache, layer by layer, against transformers' cache objects after a forward of a
# small model of each type (kv_cache.json: windows and chunks of 4, 2 and 9 tokens) -----------

KV = json.loads((ZOO / "kv_cache.json").read_text())
KV_TYPES = sorted(t for t, e in KV["kv"].items() if e["status"] == "built"
                  and t in SUPPORTED_MODEL_TYPES)


# Sizes a config class derives from others when they are null (the zoo's configs hold them
# derived from the defaults); the small model of kv_cache.json derived them from its own.
DERIVED = {"olmo_hybrid": ("linear_num_key_heads", "linear_num_value_heads",
                           "linear_key_head_dim", "linear_value_head_dim"),
           "zamba": ("attention_hidden_size", "attention_head_dim", "mamba_dt_rank")}


def _kv_spec(model_type, tmp_path):
    config = json.loads((ZOO / DOC["types"][model_type]["config"]).read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_shrunk(config, KV["kv"][model_type]["config"])))
    return ffncli.load_spec(config=path)


def _shrunk(config, small):
    """The zoo's config with the small model's keys (a multimodal config's text_config
    shrunk alike, key by key)."""
    derived = dict.fromkeys(DERIVED.get(config.get("model_type"), ()))
    text = {"text_config": _shrunk(config["text_config"], small["text_config"])} \
        if "text_config" in small else {}
    return {**config, **derived, **small, **text}


def _per_layer(kv, length, layers=0):
    """Each layer's values; a layer with no cache (no part: Nemotron-H's MLP layers) 0."""
    at = {}
    for p in kv.parts:
        for i in p.indices or range(p.layers):
            at[i] = p.per_token * (min(length, p.cap) if p.cap else length) + p.state \
                + p.compressed(length)  # DeepSeek-V4's compressed entries
    return [at.get(i, 0) for i in range(max(max(at) + 1, layers))]


@pytest.mark.parametrize("model_type", KV_TYPES)
def test_kv_cache_per_layer_is_what_transformers_holds(model_type, tmp_path):
    """Each layer's cached values at both lengths: full layers every token, sliding and
    chunked layers window - 1, latent attention its latent and rope key, Gated DeltaNet its
    fixed state; the total is their sum."""
    from ffncli.counting.kv import kv_cache

    spec = _kv_spec(model_type, tmp_path)
    for length, cache in KV["kv"][model_type]["lengths"].items():
        kv = kv_cache(spec, int(length))
        want = [row["elements"] for row in cache["layers"]]
        for name, shape in cache.get("beside_layers", {}).items():  # MiniMax: linear_cache[i]
            i = int(name.split("[")[1].rstrip("]"))
            want += [0] * (i + 1 - len(want))
            want[i] += math.prod(shape)
        if cache["cache"] != "list":  # RWKV's: one list of tensors of every layer, whole
            assert _per_layer(kv, int(length), spec.layers.decoder) == want, length
        assert kv.elements(int(length)) == sum(want)


# The decoder types ffncli counts whose cache is not checked, and why (docs/commands/params.md
# names them): Gemma 3n's whole model (its vision tower needs timm; its language model's
# type is checked), Gemma 4's assistant (it runs on its target model's KV alone), and GPT-1
# and XLNet, which transformers runs without a cache object.
KV_UNCHECKED = {
    "gemma3n": "its vision tower needs timm and Pillow to build",
    "gemma4_unified_assistant": "needs its target model's KV states to run",
    "gemma4_assistant": "needs its target model's KV states to run",
    "openai-gpt": "no cache: transformers recomputes every token",
    "xlnet": "no cache: its memory (mems) is hidden states, not keys and values",
}


def test_every_decoder_type_ffncli_counts_has_its_cache_checked():
    """Every type of the causal mapping alone (not also masked-LM or seq2seq) that ffncli
    reads: its cache is checked, or it is one of KV_UNCHECKED."""
    decoders = {t for t in DOC["mappings"]["causal_lm"] if t in SUPPORTED_MODEL_TYPES
                and t not in DOC["mappings"]["masked_lm"]
                and t not in DOC["mappings"]["seq2seq_lm"]}
    assert decoders - set(KV_TYPES) == set(KV_UNCHECKED)
    assert {"bamba", "granitemoehybrid", "kimi_linear", "bailing_hybrid", "recurrent_gemma",
            "xlstm", "kolibri1_1", "gpt_oss", "gemma3_text", "deepseek_v3", "fuyu", "gemma4",
            "jetmoe", "cpmant", "whisper", "gemma3"} <= set(KV_TYPES)
    text = (DATA.parent.parent / "docs" / "commands" / "params.md").read_text()
    assert all(f"`{t}`" in text for t in KV_UNCHECKED)


@pytest.mark.parametrize("model_type", ["gpt_oss", "qwen3_next", "llama4_text", "gemma3_text"])
def test_fit_finds_the_longest_sequence_of_a_capped_cache(model_type, tmp_path):
    """--fit's longest sequence against a walk over every length: with windows the cache
    grows fast, then slower; a budget past what the windows hold reaches further."""
    from ffncli.counting.fit import longest
    from ffncli.counting.kv import kv_cache

    kv = kv_cache(_kv_spec(model_type, tmp_path), 16)
    for free in (0, 1_000, 5_000, 20_000, 123_457, 10**6):
        walk = 0
        while kv.elements(walk + 1) * 2 <= free and walk < 10**6:
            walk += 1
        assert longest(free, kv, 2) == (walk if kv.elements(0) * 2 <= free else 0), free


def test_gemma3n_parts_beside_attention_and_ffn(cli):
    """Gemma 3n: its last 15 layers reuse K and V (no K, V or K norm, no cache); AltUp, LAuReL
    and the per-layer inputs are "other", the per-layer table an embedding."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "gemma3n_text.config.json",
                         "--seq-len", "9", "--json").out)
    truth = DOC["types"]["gemma3n_text"]["builds"]["causal_lm"]
    assert doc["groups"]["embeddings"] == truth["parts"]["embeddings"]
    assert doc["groups"]["other"] == 35 * (12_368 + 264_192 + 1_050_624) + 18_350_336 + \
        25_165_824
    shared = [x for x in doc["layers"] if x["kind"].startswith("kv-sharing")]
    assert sorted(i for x in shared for i in x["indices"]) == list(range(20, 35))
    assert all({r["name"] for r in x["attention_rows"]} == {"W_Q", "W_O"} for x in shared)
    assert [p["elements"] for p in doc["kv_cache"]["parts"] if p["kind"] == "shared"] == [0, 0]


def test_jetmoe_routes_its_attention_heads_and_its_experts(cli):
    """JetMoE's parts from transformers' shapes (JetMoeMoA, JetMoeMoE; hidden 2048, kv_channels
    128 x 16 KV heads, intermediate 5632, 8 experts, top-2): W_Q and W_O each a (8, 2048, 2048)
    tensor of experts, kv_proj 2048 -> 2 x 2048, routers (2048 -> 8) and biases of 2048 on the
    summed outputs. A token uses 2 of the 8 banks of each: 6 x (2 x 2048 x 2048) attention and
    6 x (3 x 2048 x 5632) FFN parameters a layer unused."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "jetmoe.config.json",
                         "--json").out)
    (layer,) = doc["layers"]
    assert [(r["shape"], r["params"]) for r in layer["attention_rows"]] == [
        ("8 x 2048 x 2048", 8 * 2048 * 2048), ("2048 x 4096", 2048 * 4096),
        ("8 x 2048 x 2048", 8 * 2048 * 2048), ("2048 x 8", 2048 * 8), ("2048", 2048)]
    assert layer["ffn"] == 8 * 3 * 2048 * 5632 + 2048 * 8 + 2048
    assert layer["active"] == layer["total"] - 6 * 2 * 2048 * 2048 - 6 * 3 * 2048 * 5632
    assert doc["active_params"] == doc["total_params"] - 12 * (layer["total"] - layer["active"])
    assert doc["kv_cache"]["elements_per_token"] == 12 * 2 * 16 * 128


def test_cpmant_caches_its_prompt_tokens_in_every_layer(cli):
    """CPM-Ant prepends prompt_length (32) learned prompt tokens: each of its 48 layers caches
    K and V of 32 heads x 128 for them and for the sequence's 9 tokens; its word table holds
    prompt_types x prompt_length (32 x 32) prompt rows beside the vocabulary's 30720, the head
    the vocabulary alone."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "cpmant.config.json",
                         "--seq-len", "9", "--json").out)
    per_token = 2 * 32 * 128
    assert doc["kv_cache"]["elements"] == 48 * per_token * (9 + 32)
    assert doc["kv_cache"]["elements_per_token"] == 48 * per_token
    assert doc["groups"]["embeddings"] == (30720 + 32 * 32 + 32) * 4096
    assert doc["groups"]["head"] == 30720 * 4096


def test_neomme_embeddings_and_layer_scalars_from_transformers_shapes(cli):
    """NeoMMEModel's parts (hidden 1024, embedding_rank 256, 4 KV heads of 64, 16 heads,
    patch_size 32): word table 131072 x 256 and its projection 256 -> 1024 without bias (none
    out), value embeddings 131072 x 256, the patch embedder's LayerNorm (3072, with bias), up
    3072 -> 2048 and down 2048 -> 1024 with bias; in each layer an alpha per head and two
    lambdas; norms without weights."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "neomme.config.json",
                         "--json").out)
    assert doc["groups"]["embeddings"] == 131072 * 256 + 256 * 1024 + 131072 * 256 + (
        2 * 3072 + 3072 * 2048 + 2048 * 1024 + 1024)
    (layer,) = doc["layers"]
    assert {"name": "learned scalars", "shape": "18", "params": 16 + 2} in \
        layer["attention_rows"]
    assert doc["groups"]["norms"] == 0 and doc["kv_cache"]["elements"] == 0


def _config(model_type, **changes):
    return {**json.loads((ZOO / DOC["types"][model_type]["config"]).read_text()), **changes}


HOSTILE = [
    (_config("gpt_oss", layer_types=["full_attention"] * 35),
     "key 'layer_types': expected a list of 36 layer types (full_attention, sliding_attention, "
     "chunked_attention, linear_attention), got"),
    (_config("lfm2", layer_types=["conv"] + ["full_attention"] * 31),
     "key 'layer_types': expected a list of 32 layer types"),
    (_config("gemma3_text", layer_types=None, sliding_window=None),
     None),  # no layer_types: every layer full
    (_config("gemma3_text", sliding_window=None), "missing key 'sliding_window'"),
    (_config("gemma3n_text", intermediate_size=[16384] * 34),
     "key 'intermediate_size': expected a width or a list of 35 widths, got"),
    (_config("cohere2_moe", mlp_layer_types=["sparse"] * 39 + ["moe"]),
     "key 'mlp_layer_types': expected a list of 40 layer types (sparse, dense), got"),
    (_config("deepseek_v2"), "missing key 'num_experts_per_tok'"),
    (_config("qwen3_next", linear_num_key_heads=0),
     "key 'linear_num_key_heads': expected a whole number >= 1, got 0"),
    (_config("jamba", mamba_dt_rank="big"),
     "key 'mamba_dt_rank': expected a whole number >= 1, got 'big'"),
    (_config("gemma3", text_config=[1]), "key 'text_config': expected an object, got [1]"),
    (_config("jetmoe", num_experts_per_tok=9),
     "key 'num_experts_per_tok': expected at most num_local_experts (8), got 9"),
    (_config("whisper", decoder_attention_heads=7),
     "key 'decoder_attention_heads': expected a divisor of d_model (384), got 7"),
    (_config("cpmant", dim_head=0), "key 'dim_head': expected a whole number >= 1, got 0"),
    (_config("neomme", patch_size=-1), "key 'patch_size': expected a whole number >= 1, got -1"),
    # Qwen4-Exp
    (_config("qwen4_exp_text", ple_layer_ids=[2]), "key 'ple_layer_ids': expected an empty list "
     "(Qwen4-Exp's per-layer n-gram embeddings are not read), got [2]"),
    (_config("qwen4_exp_text", indexer_kv_heads=2),
     "key 'indexer_kv_heads': expected 1 (QSA's one key head), got 2"),
    (_config("qwen4_exp_text", indexer_n_heads=None), "missing key 'indexer_n_heads'"),
    (_config("qwen4_exp_text", layer_types=["sliding_attention"] * 40),
     "key 'layer_types': expected a list of 40 layer types (linear_attention, "
     "indexed_attention), got"),
]


@pytest.mark.parametrize(("config", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs_of_the_new_readers(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    if message is None:
        assert r.code == 0, r.err
        return
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


def _documented_types() -> list[str]:
    """The model types of docs/specs.md's table, in its order: the first cell's names."""
    text = (DATA.parent.parent / "docs" / "specs.md").read_text()
    table = text.split("## Supported model types", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")][1:]  # not the head
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_the_docs_list_exactly_the_types_of_the_table():
    documented = _documented_types()
    assert len(documented) == len(set(documented))
    assert set(documented) == set(SUPPORTED_MODEL_TYPES)


def test_the_docs_name_the_transformers_checked_against_and_what_it_cannot_build():
    text = (DATA.parent.parent / "docs" / "specs.md").read_text()
    assert f"transformers {DOC['transformers']} itself" in text
    unbuilt = [t for t in SUPPORTED_MODEL_TYPES
               if not any(b.get("status") == "built" for b in DOC["types"][t]["builds"].values())]
    assert unbuilt == ["gemma3n"]  # its vision tower needs timm: through gemma3n_text
    assert "`gemma3n`" in text and "`gemma3n_text`" in text
    on_text = [t for t in SUPPORTED_MODEL_TYPES if DOC["types"][t]["text"] is False
               and DOC["types"][t]["builds"].get("causal_lm", {}).get("parts") is not None]
    assert {"llama4", "qwen3_5", "qwen3_5_moe"} <= set(on_text)
    for t in ("llama4", "qwen3_5", "qwen3_5_moe"):
        assert f"`{t}`" in text and f"`{t}_text`" in text
        assert DOC["types"][t]["builds"]["causal_lm"]["total"] == \
            DOC["types"][f"{t}_text"]["builds"]["causal_lm"]["total"]


def test_the_readme_gives_the_number_of_types():
    text = (DATA.parent.parent / "README.md").read_text()
    assert text.count(f"({len(SUPPORTED_MODEL_TYPES)} model types)") == 2
    assert f"the {len(SUPPORTED_MODEL_TYPES)} `config.json` model types" in text
