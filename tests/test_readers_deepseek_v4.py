"""DeepSeek-V4 (specs/readers/deepseek_v4.py) and the counting parts it added: queries through a
rank without a KV latent and the grouped low-rank output, the compressors and the indexer
beside attention, hyper-connections that mix the streams, hash-routed experts, and the
compressed KV cache. The expected values are computed by hand from the shapes transformers
5.25 builds (models/deepseek_v4/modeling_deepseek_v4.py: DeepseekV4Attention,
DeepseekV4HCACompressor, DeepseekV4CSACompressor, DeepseekV4Indexer, DeepseekV4HyperConnection,
DeepseekV4HyperHead, DeepseekV4HCACache, DeepseekV4CSACache), not taken from ffncli."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.kv import kv_cache
from ffncli.counting.model import count

ZOO = DATA / "zoo" / "configs"
CONFIG = json.loads((ZOO / "deepseek_v4.config.json").read_text())
# The zoo's config (DeepseekV4Config's defaults): hidden 4096, 64 heads of head_dim 512,
# q_lora_rank 1024, o_groups 8 of o_lora_rank 1024, sliding window 128, compress rates 4 (CSA)
# and 128 (HCA), an indexer of 64 heads x 128, hc_mult 4, 256 experts of 2048 (top 6).
D, HEADS, HD, QR, G, OR = 4096, 64, 512, 1024, 8, 1024


def _spec(tmp_path, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, **changes}))
    return ffncli.load_spec(config=path)


def _layer(c, name):
    return next(layer for layer in c.layers if layer.kind == name)


def _rows(rows):
    return {r.name: r.params for r in rows}


def test_attention_by_hand(tmp_path):
    """q_a_proj 4096 -> 1024, q_b_proj 1024 -> 64 x 512, kv_proj 4096 -> 512 (K and V alike),
    o_a_proj 8 blocks of (64 x 512 / 8) -> 1024, o_b_proj 8 x 1024 -> 4096, a sink a head; no
    biases. Norms: input and post-attention (4096 each), q_a_norm (1024), kv_norm (512)."""
    layer = _layer(count(_spec(tmp_path)), "HCA decoder")
    rows = _rows(layer.attention_rows)
    assert {k: rows[k] for k in ("W_Q_a", "W_Q_b", "W_K", "W_O_a", "W_O_b", "sinks")} == {
        "W_Q_a": 4096 * 1024, "W_Q_b": 1024 * 64 * 512, "W_K": 4096 * 512,
        "W_O_a": 8 * (4096 * 1024), "W_O_b": 8 * 1024 * 4096, "sinks": 64}
    assert "W_V" not in rows and "W_O" not in rows and "W_Q" not in rows
    assert layer.norm == 2 * 4096 + 1024 + 512


def test_compressors_and_indexer_by_hand(tmp_path):
    """HCA: kv_proj and gate_proj 4096 -> 512, position_bias 128 x 512, kv_norm 512. CSA:
    4096 -> 2 x 512 each, position_bias 4 x 1024, kv_norm 512; its indexer kv_proj and
    gate_proj 4096 -> 2 x 128, position_bias 4 x 256, kv_norm 128, q_b_proj 1024 -> 64 x 128,
    weights_proj 4096 -> 64."""
    c = count(_spec(tmp_path))
    hca = _rows(_layer(c, "HCA decoder").attention_rows)
    assert hca["compressor kv and gate"] == 2 * 4096 * 512
    assert hca["compressor position bias and norm"] == 128 * 512 + 512
    assert not any(name.startswith("indexer") for name in hca)
    csa = _rows(_layer(c, "CSA decoder").attention_rows)
    assert {k: v for k, v in csa.items() if k.startswith(("compressor", "indexer"))} == {
        "compressor kv and gate": 2 * 4096 * 1024,
        "compressor position bias and norm": 4 * 1024 + 512,
        "indexer kv and gate": 2 * 4096 * 256, "indexer position bias and norm": 4 * 256 + 128,
        "indexer W_Q": 1024 * 64 * 128, "indexer head weights": 4096 * 64}
    sliding = count(_spec(tmp_path, layer_types=["sliding_attention"] * 43))
    assert not any(r.name.startswith("compressor") for r in sliding.layers[0].attention_rows)


def test_hyper_connections_mix_the_streams(tmp_path):
    """attn_hc and ffn_hc: fn (2 + 4) x 4 = 24 rows of 4 x 4096, base 24, scale 3, in every
    layer; hc_head: hc_fn 4 x 16384, hc_base 4, hc_scale 1."""
    c = count(_spec(tmp_path))
    assert {layer.other for layer in c.layers} == {2 * (24 * 16384 + 24 + 3)} == {786_486}
    assert _rows(c.other_rows)["hyper-connection head"] == 4 * 16384 + 4 + 1
    two = count(_spec(tmp_path, hc_mult=2))  # (2 + 2) x 2 = 8 rows of 2 x 4096
    assert {layer.other for layer in two.layers} == {2 * (8 * 8192 + 8 + 3)}


def test_hash_routed_layers_use_as_many_experts_as_routed_ones(tmp_path):
    """DeepseekV4HashRouter: tid2eid (a buffer, vocab x top-k) names num_experts_per_tok
    experts a token, its gate weight (256 x 4096) weighs them: the FFN and a token's share of it
    as in a top-k layer. A token leaves 256 - 6 experts of 3 x 4096 x 2048 unused."""
    c = count(_spec(tmp_path))
    hashed = _layer(c, "hash-routed HCA decoder")
    routed = _layer(c, "HCA decoder")
    assert hashed.indices == (0, 1, 2)
    assert (hashed.ffn, hashed.ffn_active) == (routed.ffn, routed.ffn_active)
    assert hashed.ffn == 256 * 3 * 4096 * 2048 + 256 * 4096 + 3 * 4096 * 2048
    assert hashed.total - hashed.active == 250 * 3 * 4096 * 2048
    assert c.active_range is None


def test_legacy_keys_read_as_the_config_class_folds_them(tmp_path):
    """compress_ratios (0, 4, 128 a layer), num_hash_layers and compress_rate_csa/hca, as
    DeepseekV4Config.__post_init__ folds them, give the spec the modern keys give."""
    types = CONFIG["layer_types"]
    ratios = [{"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}[t]
              for t in types]
    modern = _spec(tmp_path)
    legacy = _spec(tmp_path, layer_types=None, compress_ratios=ratios, mlp_layer_types=None,
                   num_hash_layers=3, compress_rates=None, compress_rate_csa=4,
                   compress_rate_hca=128)
    assert legacy == modern
    none = _spec(tmp_path, layer_types=None, mlp_layer_types=None, compress_rates=None)
    assert none.pattern == modern.pattern  # the class's own defaults
    slide = _spec(tmp_path, layer_types=None, compress_ratios=[0] * 43, mlp_layer_types=None,
                  num_hash_layers=0)
    assert {k.name for k in slide.pattern} == {"sliding decoder"}


def test_compressed_cache_by_hand(tmp_path):
    """At 130 tokens a layer keeps the window's last 127 tokens of one 512-wide head, K and V
    (the cache holds the one tensor as both: 2 x 512). HCA (rate 128): one entry of 512, and
    the 2 tokens of the open window, kv and gate (2 x 512 each). CSA (rate 4): 32 entries of
    512 and of the indexer's 128; 2 open tokens, kv and gate of 2 x 512 and of 2 x 128; the
    last window's first half, kv and gate (2 x 4 x 512, 2 x 4 x 128)."""
    kv = kv_cache(_spec(tmp_path), 130)
    window = 127 * 2 * 512
    hca = window + 512 + 2 * 2 * 512
    csa = window + 32 * (512 + 128) + 2 * 2 * (1024 + 256) + 2 * 4 * (512 + 128)
    assert kv.elements(130) == 23 * hca + 20 * csa
    at_8 = [p.compressed(8) for p in kv.parts]  # 2 CSA entries, none open; HCA 8 open
    assert sorted(set(at_8)) == [2 * (512 + 128) + 2 * 4 * 640, 8 * 2 * 512]
    # long: a CSA layer adds 640 values every 4 tokens, an HCA layer 512 every 128
    grown = kv.elements(4 * 128 * 1000) - kv.elements(4 * 128 * 999)
    assert grown == 20 * 128 * 640 + 23 * 4 * 512


HOSTILE = [
    (dict(layer_types=["compressed_sparse_attention"] * 42),
     "key 'layer_types': expected a list of 43 layer types (sliding_attention, "
     "compressed_sparse_attention, heavily_compressed_attention), got"),
    (dict(mlp_layer_types=["moe"] * 42 + ["dense"]),
     "key 'mlp_layer_types': expected a list of 43 layer types (hash_moe, moe), got"),
    (dict(layer_types=None, compress_ratios=[4] * 42 + [16]),
     "key 'compress_ratios': expected a list of 43 compress ratios (0, 4, 128), got"),
    (dict(o_groups=7), "key 'o_groups': expected a divisor of num_attention_heads x head_dim "
     "(32,768), got 7"),
    (dict(compress_rates={"compressed_sparse_attention": 0}),
     "compress_rates: key 'compressed_sparse_attention': expected a whole number >= 1, got 0"),
    (dict(compress_rates=[4]), "key 'compress_rates': expected an object of layer types to "
     "rates, got"),
    (dict(q_lora_rank=8192), "key 'q_lora_rank': expected at most hidden_size (4,096), got 8192"),
]


@pytest.mark.parametrize(("changes", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_deepseek_v4_configs(cli, tmp_path, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, **changes}))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


def test_fit_bounds_the_cache_by_its_most_on_the_way(tmp_path):
    """A compressor drops its pending tokens when their window closes, so the cache shrinks at
    times (HCA: 127 pending tokens, then one entry); --fit's longest sequence must never have
    held more than the budget on the way. Oracle: a walk over every length, its running most;
    ffncli's bound (each kind's most, summed) errs on the safe side, by less than a window."""
    from ffncli.counting.fit import longest

    kv = kv_cache(_spec(tmp_path), 16)
    most, walk = 0, []
    for n in range(3000):
        most = max(most, kv.elements(n))
        walk.append(most)
    assert kv.elements(128) < kv.elements(127)  # it shrinks: a window closed
    for free in (walk[200], walk[1000] + 1, walk[2500] - 1, 2 * walk[1700]):
        got = longest(free, kv, 2)
        fits = max(n for n, m in enumerate(walk) if 2 * m <= free)
        assert got is not None and got <= fits < got + 128, free
