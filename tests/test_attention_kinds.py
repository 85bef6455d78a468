"""The attention kinds of the MoE families (issue 42 section 1) against transformers' own
modules: MLA (DeepSeek-V2/V3), GLM-4.5's biased, qk-normed, half-rotated heads, gpt-oss's sinks
and sliding layers, Llama 4's chunks, norm after the rotation and temperature on the layers
without it; and the rotary scalings (YaRN) against transformers' frequencies. The references
are tests/data/attention, made by tests/fixtures/make_attention.py with torch; each layer is
built here from the config and the tensors as a family builds it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.forward_cases import assert_close

from ffncli.base.validate import Keys
from ffncli.compute.forward import layer, ops
from ffncli.compute.forward.latent import LatentAttention, LowRank
from ffncli.compute.forward.layer import Attention
from ffncli.errors import ConfigError
from ffncli.formats.tensors import Tensors, open_tensors

DATA = Path(__file__).parent / "data" / "attention"
CASES = ["deepseek_v3", "deepseek_v3-halves", "deepseek_v2", "glm4_moe", "glm4_moe-plain",
         "gpt_oss", "llama4"]
Kind = Attention | LatentAttention


# ---------------------------------------------------------------------------------------------
# Each kind built as a family builds it: from the config's keys and the layer's tensors.


def _linear(t: Tensors, stem: str, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """An nn.Linear as [in, out] and its bias (None when the checkpoint has none)."""
    return t.need(stem + ".weight", None, dtype).T, t.get(stem + ".bias", None, dtype, False)


def latent(s: Keys, t: Tensors, i: int, dtype: np.dtype) -> LatentAttention:
    """DeepSeek-V2/V3: q_lora_rank null gives q_proj; V2's pairs are always interleaved, V3's
    as rope_interleave says (default true)."""
    p = f"model.layers.{i}.self_attn."
    nope, rot = s.required("qk_nope_head_dim"), s.required("qk_rope_head_dim")
    if s.whole("q_lora_rank") is None:
        q: np.ndarray | LowRank = _linear(t, p + "q_proj", dtype)[0]
    else:
        w_a, b_a = _linear(t, p + "q_a_proj", dtype)
        q = LowRank(w_a, b_a, t.need(p + "q_a_layernorm.weight", None, dtype),
                    _linear(t, p + "q_b_proj", dtype)[0])
    interleaved = s.data["model_type"] == "deepseek_v2" or s.flag("rope_interleave", True)
    wkv_a, bkv_a = _linear(t, p + "kv_a_proj_with_mqa", dtype)
    wo, bo = _linear(t, p + "o_proj", dtype)
    return LatentAttention(
        q, wkv_a, bkv_a, t.need(p + "kv_a_layernorm.weight", None, dtype),
        _linear(t, p + "kv_b_proj", dtype)[0], wo, bo, s.required("num_attention_heads"),
        nope, rot, s.required("v_head_dim"), ops.softmax_scale(s, 1 / math.sqrt(nope + rot)),
        ops.rotary(s, rot, 10000.0, interleaved=interleaved))


def standard(s: Keys, t: Tensors, i: int, dtype: np.dtype) -> Attention:
    """GLM-4.5, gpt-oss and Llama 4's text model: one fused Q/K/V, their kinds' fields."""
    p = f"model.layers.{i}.self_attn."
    kind = s.data["model_type"]
    hd, nq, nkv = (s.required(k) for k in ("head_dim", "num_attention_heads",
                                           "num_key_value_heads"))
    parts = [_linear(t, p + f"{x}_proj", dtype) for x in "qkv"]
    wqkv = np.concatenate([w for w, _ in parts], axis=1)
    bqkv = None if parts[0][1] is None else np.concatenate([b for _, b in parts if b is not None])
    wo, bo = _linear(t, p + "o_proj", dtype)
    layer_type = s.data.get("layer_types", [None] * (i + 1))[i]
    fields: dict[str, Any] = {"qk_eps": s.number("rms_norm_eps")}
    if kind == "glm4_moe":
        fields["rope"] = ops.rotary(s, hd, 10000.0, default_partial=0.5)
        if s.flag("use_qk_norm", False):
            fields["q_norm"] = t.need(p + "q_norm.weight", (hd,), dtype)
            fields["k_norm"] = t.need(p + "k_norm.weight", (hd,), dtype)
    elif kind == "gpt_oss":
        fields["rope"] = ops.rotary(s, hd, 10000.0)
        fields["sinks"] = t.need(p + "sinks", (nq,), dtype)
        if layer_type == "sliding_attention":
            fields["window"] = s.required("sliding_window")
    else:  # llama4_text: no_rope_layers[i] is 1 where the layer IS rotated
        rotated = bool(s.data["no_rope_layers"][i])
        if rotated:
            fields["rope"] = ops.rotary(s, hd, 500000.0, interleaved=True)
            if s.flag("use_qk_norm", True):
                fields.update(q_norm=np.ones(hd, dtype), k_norm=np.ones(hd, dtype),
                              norm_after_rope=True)
        elif s.flag("attn_temperature_tuning", True):
            fields["temperature"] = (s.number("floor_scale"), s.number("attn_scale"))
        if layer_type == "chunked_attention":
            fields["chunk"] = s.required("attention_chunk_size")
    return Attention(wqkv, bqkv, wo, bo, nq, nkv, hd, 1 / math.sqrt(hd), causal=True,
                     **fields)


def build(case: str, i: int, dtype: type = np.float32) -> Kind:
    config = json.loads((DATA / case / "config.json").read_text())
    s = Keys(config, f"{case}/config.json")
    with open_tensors(DATA / case / "attention.safetensors") as t:
        if config["model_type"].startswith("deepseek"):
            return latent(s, t, i, np.dtype(dtype))
        return standard(s, t, i, np.dtype(dtype))


def run(attention: Kind, case: str, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(ours, transformers') output of layer i's attention on every sequence, packed."""
    expected = np.load(DATA / case / "expected.npz")
    ends = np.cumsum(expected["lengths"])
    bounds = list(zip(ends - expected["lengths"], ends, strict=True))
    x = expected[f"input{i}"]
    got = attention(x.astype(attention.wo.dtype), [(int(a), int(b)) for a, b in bounds],
                    expected["positions"], ops.Scratch(attention.wo.dtype))
    return got, expected[f"output{i}"]


def layers_of(case: str) -> list[int]:
    return sorted(int(k.removeprefix("input")) for k in np.load(DATA / case / "expected.npz")
                  if k.startswith("input"))


# ---------------------------------------------------------------------------------------------
# Against transformers.


@pytest.mark.parametrize("case", CASES)
def test_each_kind_equals_transformers(case):
    for i in layers_of(case):
        got, want = run(build(case, i), case, i)
        assert_close(got, want, f"{case} layer {i}")


@pytest.mark.parametrize("case", ["gpt_oss", "llama4", "deepseek_v3"])
def test_float64_and_one_query_a_block_too(case, monkeypatch):
    """Blocks of one query (the window, the chunks and the sinks cut by block) and float64
    give the same outputs."""
    monkeypatch.setattr(layer, "SCORE_ELEMENTS", 1)
    for i in layers_of(case):
        got, want = run(build(case, i, np.float64), case, i)
        assert got.dtype == np.float64
        assert_close(got, want, f"{case} layer {i}")


def _flip_rope(a: Kind, **change: Any) -> Kind:
    assert a.rope is not None
    fields = {"inv_freq": a.rope.inv_freq, "attention_factor": a.rope.attention_factor,
              "interleaved": a.rope.interleaved, **change}
    return dataclasses.replace(a, rope=ops.Rope(**fields))


# (case, layer, what is left out or changed): each must move the output off transformers'
WRONG = [
    ("deepseek_v3", 0, "pairs rotated as halves", lambda a: _flip_rope(a, interleaved=False)),
    ("deepseek_v3", 0, "no attention factor", lambda a: _flip_rope(a, attention_factor=1.0)),
    ("deepseek_v3", 0, "no mscale in the softmax scale",
     lambda a: dataclasses.replace(a, scale=1 / math.sqrt(16))),
    ("deepseek_v3", 0, "latent norm at eps 1e-2", lambda a: dataclasses.replace(a, eps=1e-2)),
    ("deepseek_v3", 0, "kv_a bias left out", lambda a: dataclasses.replace(a, bkv_a=None)),
    ("deepseek_v3", 0, "q_a_layernorm left out", lambda a: dataclasses.replace(
        a, q=dataclasses.replace(a.q, norm=np.ones_like(a.q.norm)))),
    ("deepseek_v3-halves", 0, "halves rotated as pairs",
     lambda a: _flip_rope(a, interleaved=True)),
    ("deepseek_v2", 1, "pairs rotated as halves", lambda a: _flip_rope(a, interleaved=False)),
    ("glm4_moe", 0, "whole heads rotated", lambda a: _flip_rope(
        a, inv_freq=ops.base_frequencies(10000.0, 16))),
    ("glm4_moe", 0, "no q norm", lambda a: dataclasses.replace(a, q_norm=None)),
    ("glm4_moe", 1, "no q/k/v biases", lambda a: dataclasses.replace(a, bqkv=None)),
    ("glm4_moe-plain", 0, "half of each head rotated, not a quarter", lambda a: _flip_rope(
        a, inv_freq=ops.base_frequencies(10000.0, 8))),
    ("gpt_oss", 0, "no sinks", lambda a: dataclasses.replace(a, sinks=None)),
    ("gpt_oss", 1, "no sinks", lambda a: dataclasses.replace(a, sinks=None)),
    ("gpt_oss", 0, "no sliding window", lambda a: dataclasses.replace(a, window=None)),
    ("gpt_oss", 1, "a window on the full layer", lambda a: dataclasses.replace(a, window=5)),
    ("gpt_oss", 0, "no output bias", lambda a: dataclasses.replace(a, bo=None)),
    ("gpt_oss", 0, "YaRN's attention factor left out",
     lambda a: _flip_rope(a, attention_factor=1.0)),
    ("llama4", 0, "no chunks", lambda a: dataclasses.replace(a, chunk=None)),
    ("llama4", 0, "chunks of 5", lambda a: dataclasses.replace(a, chunk=5)),
    ("llama4", 0, "no qk norm", lambda a: dataclasses.replace(a, q_norm=None, k_norm=None)),
    ("llama4", 0, "pairs rotated as halves", lambda a: _flip_rope(a, interleaved=False)),
    ("llama4", 1, "no temperature", lambda a: dataclasses.replace(a, temperature=None)),
    ("llama4", 1, "a rotation on the NoPE layer", lambda a: dataclasses.replace(
        a, rope=ops.Rope(ops.base_frequencies(500000.0, 8)))),
]


@pytest.mark.parametrize("case,i,what,change", WRONG, ids=[f"{c}-{i}-{w}" for c, i, w, _ in WRONG])
def test_each_setting_is_seen(case, i, what, change):
    """The comparison can fail: each setting of each kind, changed, moves the output."""
    got, want = run(change(build(case, i)), case, i)
    with pytest.raises(AssertionError):
        assert_close(got, want, f"{case} layer {i} with {what}")


# ---------------------------------------------------------------------------------------------
# The pieces, against direct formulas.


def test_the_sink_is_a_softmax_column_dropped_after():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(2, 3, 4, 5)) * 30  # large: the max must include the sink
    sink = rng.normal(size=(2, 3, 1, 1)) * 30
    full = np.concatenate([s, np.broadcast_to(sink, (2, 3, 4, 1))], axis=-1)
    e = np.exp(full - full.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True))[..., :-1]
    got = ops.softmax_(s.copy(), sink)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert not np.allclose(ops.softmax_(s.copy()), want, atol=1e-3)  # the sink's share


def test_chunks_cut_each_sequence_apart():
    a = Attention(np.zeros((4, 12)), None, np.zeros((4, 4)), None, 1, 1, 4, 0.5, True,
                  chunk=4)
    assert a.pieces([(0, 10), (10, 13)]) == [(0, 4), (4, 8), (8, 10), (10, 13)]
    assert dataclasses.replace(a, chunk=None).pieces([(0, 10)]) == [(0, 10)]


def test_the_norm_after_the_rotation_matters_when_cos_and_sin_are_scaled():
    """Llama 4 norms after rotating. A weightless norm and a rotation commute (the llama4
    case cannot tell the order); with cos and sin scaled (an attention factor) they do not:
    normed last, every head has RMS 1, so the factor of 2 drops out."""
    a = build("llama4", 0)
    assert a.rope is not None and a.norm_after_rope
    doubled = _flip_rope(a, attention_factor=2.0)
    before = dataclasses.replace(doubled, norm_after_rope=False)
    plain, _ = run(a, "llama4", 0)
    np.testing.assert_allclose(run(doubled, "llama4", 0)[0], plain, rtol=1e-4, atol=1e-5)
    assert not np.allclose(run(before, "llama4", 0)[0], plain, rtol=1e-2, atol=1e-3)


def test_temperature_is_llama4s():
    got = layer.temperatures(np.array([0, 2, 3, 7, 8000]), 4.0, 0.5, np.dtype(np.float64))
    want = [1 + 0.5 * math.log1p(math.floor((p + 1) / 4)) for p in (0, 2, 3, 7, 8000)]
    np.testing.assert_allclose(got.ravel(), want, rtol=1e-6)


ROPE = json.loads((DATA / "rope" / "cases.json").read_text())


@pytest.mark.parametrize("k", range(len(ROPE)))
def test_rotary_scalings_equal_transformers(k):
    """inv_freq and the attention factor of YaRN (truncated or not, mscale pairs, a given
    attention factor, factor from the context lengths, partial rotary) as transformers'."""
    case = ROPE[k]
    expected = np.load(DATA / "rope" / "expected.npz")
    inv, factor = ops.rope_scaling(Keys(case, f"case {k}"), case["head_dim"], 10000.0)
    np.testing.assert_allclose(inv, expected[f"inv_freq{k}"], rtol=1e-6)
    assert factor == pytest.approx(float(expected[f"attention_factor{k}"]), rel=1e-12)


def test_a_yarn_rotation_changes_the_frequencies():
    """The comparison above can fail: YaRN's frequencies are not the plain ones."""
    case = ROPE[0]
    inv, factor = ops.rope_scaling(Keys(case, "t"), case["head_dim"], 10000.0)
    plain = ops.base_frequencies(10000.0, case["head_dim"])
    assert not np.allclose(inv, plain, rtol=1e-3) and factor != 1


def test_glms_default_half_rotation_and_a_rope_that_would_leave_things_out():
    """Without partial_rotary_factor the caller's default holds (GLM-4.5: 0.5). A family that
    builds Rope(rope_frequencies(...)) cannot apply a partial rotation or YaRN's attention
    factor: refused, one line each, rather than computed wrong."""
    plain = Keys({"rope_theta": 100.0}, "c.json")
    inv, _ = ops.rope_scaling(plain, 16, 1e4, default_partial=0.5)
    np.testing.assert_allclose(inv, 100.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-6)
    with pytest.raises(ConfigError) as exc:
        ops.rope_frequencies(Keys({"partial_rotary_factor": 0.5}, "c.json"), 16, 1e4)
    assert str(exc.value) == ("c.json: key 'partial_rotary_factor': the forward rotates whole "
                              "heads, expected 1, got 0.5")
    with pytest.raises(ConfigError) as exc:
        ops.rope_frequencies(Keys({"rope_scaling": ROPE[0]["rope_parameters"]}, "c.json"), 16,
                             1e4)
    assert str(exc.value) == ("c.json: key 'rope_scaling': rope type 'yarn' scales cos and sin "
                              "by 1.02496; this family's forward does not")
    with pytest.raises(ConfigError) as exc:
        ops.rope_scaling(Keys({"partial_rotary_factor": 0.1875}, "c.json"), 16, 1e4)
    assert str(exc.value) == ("c.json: key 'partial_rotary_factor': heads of 16 values, 3 of "
                              "them turned; expected an even width of at most 16 turned, got "
                              "a factor of 0.1875")


def test_mla_softmax_scale_folds_mscale_all_dim():
    yarn = Keys({"rope_scaling": {"type": "yarn", "factor": 40.0, "mscale_all_dim": 1.0,
                                  "original_max_position_embeddings": 4096}}, "c")
    m = 0.1 * math.log(40.0) + 1
    assert ops.softmax_scale(yarn, 0.125) == pytest.approx(0.125 * m * m, rel=1e-15)
    assert ops.softmax_scale(Keys({}, "c"), 0.125) == 0.125
    unset = Keys({"rope_scaling": {"type": "yarn", "factor": 40.0, "mscale_all_dim": 0}}, "c")
    assert ops.softmax_scale(unset, 0.125) == 0.125


def test_a_block_runs_mla_as_its_attention():
    """A Block takes any SelfAttention: pre-norm, its first half is h + mla(norm1(h)), the
    positions counted from each sequence's start (the second sequence as transformers ran
    it alone)."""
    from types import SimpleNamespace

    expected = np.load(DATA / "deepseek_v3" / "expected.npz")
    mla = build("deepseek_v3", 0)
    x = expected["input0"]
    d = x.shape[1]
    norm = layer.Norm(np.ones(d, np.float32), None, 1e-6, rms=True)
    engine: Any = SimpleNamespace(d_model=d)
    block = layer.Block(engine, mla, norm, norm, False, ops.Scratch(np.dtype(np.float32)))
    ms = np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-6)
    h = (x * ms).astype(np.float32)  # norm1(h) is x again (to float32 rounding)
    got = block.attend(h, [(0, 13), (13, 19)])
    assert_close(got - h, expected["output0"], "deepseek_v3 layer 0 in a Block")
