"""``perplexity`` against PyTorch: the fixtures of tests/fixtures/make_perplexity.py (torch
2.13, transformers 5.24; see tests/data/perplexity/README.md), which feed ffncli's own token ids
to torch. The tests do not import torch.

- Dense perplexity under every protocol, float32: within 1e-5 relative on the tiny GPT-2,
  LLaMA, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2, DeepSeek-V3 and GLM-4.5 checkpoints and
  1e-4 on SmolLM2-135M (the issue asks 1e-4).
- Thresholds calibrated on ffncli's own dense activations: within float32 rounding of numpy's
  quantile on PyTorch's (rtol 1e-4: a quantile at a small |a| carries the absolute rounding of
  the layer's larger values; OpenBLAS's Haswell kernel put one tiny GPT-2 threshold 1.1e-5
  away); achieved sparsity within 0.01.
- The sparsified tiny models, given PyTorch's thresholds: the same perplexity, KL, top-1 and
  per-layer error (a sparsified perplexity moves with the thresholds' last bits: see
  test_own_thresholds_move_a_sparse_perplexity_a_little).
- SmolLM2 sparsified: within the band the fixture measured (float32 and float64 torch, the
  thresholds moved by 1e-6 of themselves), widened by its own width or 3%, whichever is more
  (the band is a lower bound on the spread: the Haswell kernel put topk's KL 1.1% below it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.installed_models import minilm, smollm2

from ffncli.analysis.perplexity import Protocol
from ffncli.compute.sparse import Cut
from ffncli.formats.text import Sequences
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.perplexity import perplexity
from ffncli.jobs.resolve import load_document, open_forward
from ffncli.jobs.thresholds import Variant
from ffncli.specs.spec import Overrides

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

DATA = Path(__file__).parent / "data"
FIXTURES = DATA / "perplexity"
RULES = ("cats-0.25", "cats-0.5", "teal-0.5", "topk-0.5")
PROTOCOLS = {"default": {}, "all": {"score": "all"}, "stride16": {"stride": 16},
             "stride32": {"stride": 32}}


def _expected(case: str) -> dict:
    return json.loads((FIXTURES / case / "expected.json").read_text())


def _ids(case: str) -> Sequences:
    ids = np.array((FIXTURES / case / "ids.txt").read_text().split(), dtype=np.int64)
    return Sequences((ids,), (1,), case, "0" * 64)


def _as_fixture(doc: Sequences, ctx: int, want: dict) -> Sequences:
    """The text the fixture's stride windows cover. The fixture (made before ffncli ran
    Hugging Face's recipe to its end) drops the recipe's last, shorter window; on the ids up
    to the end of its last full window the recipe runs exactly the fixture's windows (the
    last ends at the text's end). Other protocols: ``doc`` itself."""
    if "stride" not in want:
        return doc
    end = (want["windows"] - 1) * want["stride"] + ctx
    return Sequences((doc.ids[0][:end],), doc.lines, doc.source, doc.sha256)


def _open(case: str):
    return open_forward(ModelChoice(weights=DATA / "forward" / case / "model.safetensors"),
                        Overrides())


def _variant(name: str, sparse: dict, given: bool) -> Variant:
    rule, target = name.split("-")
    if not given or rule == "topk":
        return Variant(rule, float(target))
    t = sparse["thresholds"]
    cuts = {i: Cut("teal", threshold=a, down=b) for i, (a, b) in
            enumerate(zip(t["in"], t["down"], strict=True))} if rule == "teal" else \
        {i: Cut(rule, threshold=v) for i, v in enumerate(t)}
    return Variant(rule, float(target), cuts)


def _check_cuts(layers, sparse: dict, rtol: float) -> None:
    """The calibrated thresholds and the achieved sparsity of each layer."""
    rule = sparse["rule"]
    if rule == "topk":
        assert [c.cut.keep for c in layers] == [sparse["k"]] * len(layers)
        np.testing.assert_allclose([c.sparsity for c in layers], sparse["achieved_sparsity"],
                                   atol=1e-12)
        return
    if rule == "teal":
        t, s = sparse["thresholds"], sparse["achieved_sparsity"]
        np.testing.assert_allclose([c.cut.threshold for c in layers], t["in"], rtol=rtol)
        np.testing.assert_allclose([c.cut.down for c in layers], t["down"], rtol=rtol)
        np.testing.assert_allclose([c.sparsity_in for c in layers], s["in"], atol=0.01)
        np.testing.assert_allclose([c.sparsity_down for c in layers], s["down"], atol=0.01)
        return
    np.testing.assert_allclose([c.cut.threshold for c in layers], sparse["thresholds"],
                               rtol=rtol)
    np.testing.assert_allclose([c.sparsity for c in layers], sparse["achieved_sparsity"],
                               atol=0.01)


@pytest.mark.parametrize("case", ["gpt2", "llama",  # and the mixtures of experts (issue 42)
                                  "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss",
                                  "llama4_text", "deepseek_v2", "deepseek_v3", "glm4_moe"])
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_dense_perplexity_is_pytorchs(case, protocol):
    want = _expected(case)["float32"]["dense"][protocol]
    with _open(case) as m:
        r = perplexity(m, _as_fixture(_ids(case), 32, want), Protocol(32, **PROTOCOLS[protocol]))
    assert (r.tokens_scored, r.windows) == (want["tokens_scored"], want.get("windows", r.windows))
    assert r.perplexity == pytest.approx(want["perplexity"], rel=1e-5)
    assert r.nll_mean == pytest.approx(want["nll_mean"], rel=1e-5)


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_calibrated_thresholds_are_numpys_quantile_of_pytorchs_activations(case):
    sparse = _expected(case)["float32"]["sparse"]
    with _open(case) as m:
        r = perplexity(m, _ids(case), Protocol(32),
                       variants=[_variant(name, sparse[name], False) for name in RULES])
    for name, v in zip(RULES, r.variants, strict=True):
        _check_cuts(v.layers, sparse[name], rtol=1e-4)
    assert r.calibration["tokens"] == _expected(case)["float32"]["calibration_tokens"]


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_the_sparsified_model_is_pytorchs_given_its_thresholds(case):
    sparse = _expected(case)["float32"]["sparse"]
    with _open(case) as m:
        r = perplexity(m, _ids(case), Protocol(32),
                       variants=[_variant(name, sparse[name], True) for name in RULES])
    for name, v in zip(RULES, r.variants, strict=True):
        want = sparse[name]
        assert v.perplexity == pytest.approx(want["perplexity"], rel=1e-5), name
        assert v.kl_mean == pytest.approx(want["kl_mean"], rel=1e-4), name
        assert v.top1 == pytest.approx(want["top1_agreement"], abs=1e-12), name
        np.testing.assert_allclose([c.ffn_error for c in v.layers],
                                   want["ffn_relative_error"], rtol=1e-4)


def test_own_thresholds_move_a_sparse_perplexity_a_little():
    """llama teal at 0.5: ffncli's own thresholds are a few float32 ulps from PyTorch's, and
    about one entry of 36,864 lands on the other side of one: 0.2% of perplexity."""
    sparse = _expected("llama")["float32"]["sparse"]["teal-0.5"]
    with _open("llama") as m:
        own = perplexity(m, _ids("llama"), Protocol(32),
                         variants=[_variant("teal-0.5", sparse, False)]).variants[0]
    assert own.perplexity == pytest.approx(sparse["perplexity"], rel=5e-3)
    assert own.kl_mean == pytest.approx(sparse["kl_mean"], rel=1e-3)


def test_minilms_fidelity_is_pytorchs():
    want = _expected("minilm")["float32"]["sparse"]
    lines = (DATA / "forward" / "minilm" / "ids.txt").read_text().splitlines()
    doc = Sequences(tuple(np.array(line.split(), dtype=np.int64) for line in lines),
                    tuple(range(1, len(lines) + 1)), "ids", "0" * 64)
    with open_forward(ModelChoice(weights=minilm()), Overrides()) as m:
        r = perplexity(m, doc, None, variants=[Variant("cats", 0.5), Variant("topk", 0.5)])
    for name, v in zip(("cats-0.5", "topk-0.5"), r.variants, strict=True):
        _check_cuts(v.layers, want[name], rtol=1e-4)
        assert v.token_cosine == pytest.approx(want[name]["token_cosine"], rel=1e-4)
        assert v.sentence_cosine == pytest.approx(want[name]["sentence_cosine"], rel=1e-4)
        np.testing.assert_allclose([c.ffn_error for c in v.layers],
                                   want[name]["ffn_relative_error"], rtol=1e-3)


@pytest.fixture(scope="module")
def smollm2_document():
    path = smollm2()
    with open_forward(ModelChoice(weights=path), Overrides()) as m:
        doc, bos = load_document(Path(__file__).parents[1] / "examples" / "texts" /
                                 "alice_chapter1.txt", None, m)
    return path, doc, bos


def test_smollm2_reads_the_ids_the_fixture_fed_to_torch(smollm2_document):
    _, doc, bos = smollm2_document
    assert list(doc.ids[0]) == list(_ids("smollm2").ids[0])
    assert bos is None and _expected("smollm2")["adds_bos"] is False


@pytest.mark.parametrize("protocol, kw", [("all", {"score": "all"}),
                                          ("stride256", {"stride": 256})])
def test_smollm2s_dense_perplexity_is_pytorchs(smollm2_document, protocol, kw):
    path, doc, bos = smollm2_document
    want = _expected("smollm2")["float32"]["dense"][protocol]
    with open_forward(ModelChoice(weights=path), Overrides()) as m:
        r = perplexity(m, _as_fixture(doc, 512, want), Protocol(512, **kw), bos=bos)
    assert (r.tokens_scored, r.windows) == (want["tokens_scored"], want.get("windows", r.windows))
    assert r.perplexity == pytest.approx(want["perplexity"], rel=1e-4)


def test_smollm2_sparsified_lands_in_pytorchs_band(smollm2_document):
    path, doc, bos = smollm2_document
    fixture = _expected("smollm2")
    sparse, band = fixture["float32"]["sparse"], fixture["band"]
    with open_forward(ModelChoice(weights=path), Overrides()) as m:
        r = perplexity(m, doc, Protocol(512), bos=bos,
                       variants=[_variant(name, sparse[name], False) for name in RULES])
    assert r.perplexity == pytest.approx(fixture["float32"]["dense"]["default"]["perplexity"],
                                         rel=1e-4)
    for name, v in zip(RULES, r.variants, strict=True):
        _check_cuts(v.layers, sparse[name], rtol=1e-4)
        for key, got in (("perplexity", v.perplexity), ("kl_mean", v.kl_mean)):
            lo, hi = band[name][key]
            wide = max(hi - lo, 0.03 * lo)
            assert lo - wide <= got <= hi + wide, (name, key, got, lo, hi)
