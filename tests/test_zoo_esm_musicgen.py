"""ESM and MusicGen's decoders (issue 40): their new counting parts against figures
computed by hand from transformers 5.25's shapes, their published configs' layouts, and the
config errors of their readers."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.embeddings import codebook_tables
from ffncli.counting.parts import contact_head_row
from ffncli.specs.spec import EmbeddingsSpec

ZOO = DATA / "zoo"


def test_codebook_tables_are_one_table_a_codebook_with_the_pad_row():
    """MusicgenDecoder.embed_tokens: num_codebooks x nn.Embedding(vocab_size + 1, d)."""
    row = codebook_tables(EmbeddingsSpec(vocab=2048, codebooks=4), 1024)
    assert (row.shape, row.params) == ("4 x 2049 x 1024", 4 * 2049 * 1024)  # 8,392,704


def test_musicgen_has_a_head_a_codebook():
    """MusicgenForCausalLM.lm_heads: num_codebooks x nn.Linear(d, vocab_size, bias=False),
    each run on every token."""
    counted = ffncli.count(ffncli.load_spec(config=ZOO / "configs" / "musicgen.config.json"))
    assert counted.groups["head"] == 4 * 1024 * 2048  # 8,388,608
    assert counted.head_flops == 2 * 4 * 1024 * 2048


def test_contact_head_reads_every_layers_every_head():
    """EsmContactPredictionHead.regression: nn.Linear(layers x heads, 1) with a bias (ESM-2
    650M: 33 layers of 20 heads)."""
    row = contact_head_row(33, 20)
    assert (row.shape, row.params) == ("660 x 1", 661)


# facebook/esm2_t33_650M_UR50D's config.json, the keys that set a shape
ESM2_650M = {"model_type": "esm", "vocab_size": 33, "hidden_size": 1280,
             "num_hidden_layers": 33, "num_attention_heads": 20, "intermediate_size": 5120,
             "max_position_embeddings": 1026, "position_embedding_type": "rotary",
             "emb_layer_norm_before": False, "token_dropout": True}


def _count(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return ffncli.count(ffncli.load_spec(config=path))


def test_esm2_650m_by_hand(tmp_path):
    """EsmModel of ESM-2 650M: 33 layers of 4 (d^2 + d) attention, 2 norms, d x ff + ff and
    ff x d + d; 33 x d word vectors (rotary: no position table); the final LayerNorm, the pooler
    (d^2 + d) and the contact head (661). transformers 5.25 builds 651,040,661 too."""
    d, ff = 1280, 5120
    layer = 4 * (d * d + d) + 2 * 2 * d + (d * ff + ff) + (ff * d + d)
    total = 33 * layer + 33 * d + 2 * d + (d * d + d) + 661
    assert total == 651_040_661
    assert _count(tmp_path, ESM2_650M).total == total


def test_esm_norm_before_the_layers_is_read(tmp_path):
    """emb_layer_norm_before adds EsmEmbeddings.layer_norm (2 x 768; transformers builds
    86,461,585 from the zoo's config with it)."""
    config = json.loads((ZOO / "configs" / "esm.config.json").read_text())
    assert _count(tmp_path, {**config, "emb_layer_norm_before": True}).total == 86_461_585


def _musicgen_as_published(model_type, **decoder):
    """A composite config as a checkpoint's config.json holds it: the decoder's keys in
    "decoder" only (the zoo's config also holds them at the top, as its causal LM reads
    them)."""
    config = json.loads((ZOO / "configs" / f"{model_type}.config.json").read_text())
    top = {k: v for k, v in config.items() if k not in config["decoder"] or k == "model_type"}
    return {**top, "decoder": {**config["decoder"], **decoder}}


@pytest.mark.parametrize(("model_type", "decoder", "total"), [
    ("musicgen", {}, 419_584_000),  # facebook/musicgen-small's decoder
    ("musicgen_melody", dict(hidden_size=1536, num_hidden_layers=48, num_attention_heads=24,
                             ffn_dim=6144), 1_384_424_448),  # facebook/musicgen-melody's
])
def test_musicgen_reads_the_decoder_of_a_published_config(tmp_path, model_type, decoder,
                                                          total):
    """What transformers builds from the same keys at the top (the zoo's truths)."""
    config = _musicgen_as_published(model_type, **decoder)
    assert "hidden_size" not in config
    assert _count(tmp_path, config).total == total


@pytest.mark.parametrize(("change", "message"), [
    ({"position_embedding_type": "relative_key"},
     "key 'position_embedding_type': expected 'absolute' or 'rotary', got 'relative_key'"),
    ({"vocab_size": None}, "missing key 'vocab_size'"),
])
def test_esm_config_errors(cli, tmp_path, change, message):
    config = {**json.loads((ZOO / "configs" / "esm.config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")
