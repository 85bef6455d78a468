"""The hybrids' counting parts (issue 40, readers/hybrid.py), each against a figure worked out by
hand from the shapes transformers 5.25 builds (its modeling_*.py), not only the zoo's totals."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.kv import kv_cache
from ffncli.counting.mixers import mamba2_matrices
from ffncli.specs.archs import spec_from_config
from ffncli.specs.layers import Mamba2MixerSpec

ZOO = DATA / "zoo"


def _config(model_type, **changes):
    return {**json.loads((ZOO / "configs" / f"{model_type}.config.json").read_text()), **changes}


def _spec(tmp_path, model_type, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(model_type, **changes)))
    return ffncli.load_spec(config=path)


def test_a_mamba2_mixer_with_groups_and_its_gated_norm():
    """Nemotron-H's mixer: 128 heads of 64 (d_inner 8192), 8 groups of B and C of state 128.
    in_proj: gate 8192 + conv stream (8192 + 2 x 8 x 128 = 10240) + one dt a head = 18560."""
    mix = Mamba2MixerSpec(d_inner=8192, d_state=128, heads=128, groups=8)
    rows = {name: n for name, _, n in mamba2_matrices(4096, mix)}
    assert rows == {"in_proj": 4096 * 18560, "conv1d (depthwise)": 10240 * 4 + 10240,
                    "dt_bias, A_log, D": 3 * 128, "gated norm": 8192,
                    "out_proj": 8192 * 4096}
    assert sum(rows.values()) == 109_635_968  # the zoo's layer 0 less its norm (4096)


def test_a_mamba2_mixer_without_its_gated_norm():
    """Falcon-H1's mixer (mamba_d_ssm 1024, mamba_rms_norm false): no norm weight at all."""
    mix = Mamba2MixerSpec(d_inner=1024, d_state=256, heads=128, norm=False)
    rows = {name: n for name, _, n in mamba2_matrices(4096, mix)}
    assert rows == {"in_proj": 4096 * (1024 + 1536 + 128), "conv1d (depthwise)": 1536 * 5,
                    "dt_bias, A_log, D": 384, "out_proj": 1024 * 4096}


def test_falcon_h1_counts_attention_and_mamba_of_one_layer_and_caches_both(tmp_path):
    """Every layer: Q 4096x4096, K and V 4096x1024, O 4096x4096, the Mamba-2 above, a SwiGLU of
    14336 and two norms. The cache of a layer (kv_cache.json's small model: 2 kv heads of 16)
    holds K and V for each token and the mixer's state: conv 1536 x 4 and 128 heads x 8 x 256."""
    count = ffncli.count(ffncli.load_spec(config=ZOO / "configs" / "falcon_h1.config.json"))
    (layer,) = count.layers
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024
    mamba = 4096 * 2688 + 1536 * 5 + 384 + 1024 * 4096
    assert (layer.count, layer.attention, layer.ffn, layer.norm) == (
        32, attention + mamba, 3 * 4096 * 14336, 2 * 4096)
    small = _spec(tmp_path, "falcon_h1", hidden_size=64, intermediate_size=96,
                  num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=8)
    (part,) = kv_cache(small, 9).parts
    assert (part.layers, part.per_token, part.state) == (8, 2 * 2 * 16, 1536 * 4 + 1024 * 256)
    assert part.elements(9) == 8 * 268_864  # kv_cache.json: 268,864 a layer at 9 tokens


def test_nemotron_h_blocks_hold_one_mixer_or_one_ffn(tmp_path):
    """M, E, *, -: the Mamba and attention blocks have no FFN; the MLP and MoE blocks no mixer
    and no cache. MoE: 8 experts up 4096x7688 and down, router 4096x8, one shared expert as
    wide; top-2 active."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "nemotron_h.config.json")
    layers = {x.kind: x for x in ffncli.count(spec).layers}
    expert = 2 * 4096 * 7688
    assert {k: (x.indices, x.ffn, x.ffn_active) for k, x in layers.items()} == {
        "mamba": ((0,), 0, 0),
        "moe": ((1,), 8 * expert + 4096 * 8 + expert, 2 * expert + 4096 * 8 + expert),
        "attention": ((2,), 0, 0),
        "mlp": ((3,), 2 * 4096 * 21504, 2 * 4096 * 21504)}
    assert layers["attention"].attention == 2 * 4096 * 4096 + 2 * 4096 * 1024
    kv = kv_cache(spec, 9)
    assert sorted((p.kind, p.indices) for p in kv.parts) == [("full", (2,)), ("mamba", (0,))]
    pattern = _spec(tmp_path, "nemotron_h", layers_block_type=None,
                    hybrid_override_pattern="M-M*E")
    assert [k.name for k in pattern.pattern] == ["mamba", "mlp", "mamba", "attention", "moe"]


def test_bamba_attention_layers_by_index(tmp_path):
    """attn_layer_indices [1, 3]: those two layers attend (Q 4096x4096, K, V 4096x1024, O), the
    others keep the Mamba-2 (d_inner 8192, 1 group of 256: conv 8704, in_proj 17024)."""
    spec = _spec(tmp_path, "bamba", num_hidden_layers=4, attn_layer_indices=[1, 3])
    layers = {x.kind: x for x in ffncli.count(spec).layers}
    mamba = 4096 * 17024 + 8704 * 5 + 384 + 8192 + 8192 * 4096
    assert {k: (x.indices, x.attention) for k, x in layers.items()} == {
        "mamba decoder": ((0, 2), mamba),
        "decoder": ((1, 3), 2 * 4096 * 4096 + 2 * 4096 * 1024)}


HOSTILE = [
    ("nemotron_h", dict(layers_block_type=["mamba", "moe", "sliding_attention"]),
     "key 'layers_block_type': expected a list of layer types (linear_attention, mamba, "
     "full_attention, attention, mlp, moe), got"),
    ("nemotron_h", dict(layers_block_type=None, hybrid_override_pattern="M-X"),
     "key 'hybrid_override_pattern': expected a string of M, *, - and E, one a layer, got"),
    ("nemotron_h", dict(moe_latent_size=1024),
     "key 'moe_latent_size': expected null (experts on a latent projection are not read), got"),
    ("nemotron_h", dict(mlp_bias=True),
     "key 'mlp_bias': expected false with MoE layers (the experts have no biases), got"),
    ("falcon_h1", dict(projectors_bias=True),
     "key 'projectors_bias': expected mamba_proj_bias (false); a bias on out_proj alone is "
     "not read, got"),
    ("bamba", dict(mamba_d_head=32),
     "key 'mamba_d_head': expected the Mamba width / mamba_n_heads (8,192 / 128), got 32"),
    ("granitemoehybrid", dict(mamba_n_heads=100, mamba_d_head="auto"),
     "key 'mamba_n_heads': expected a divisor of the Mamba width (8,192), got 100"),
    ("granitemoehybrid", dict(layer_types=["mamba"] * 31),
     "key 'layer_types': expected a list of 32 layer types (linear_attention, mamba, "
     "full_attention, attention), got"),
]


@pytest.mark.parametrize(("model_type", "changes", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs_of_the_hybrids(cli, tmp_path, model_type, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(model_type, **changes)))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


def test_olmo_hybrid_linear_layers_and_the_widths_the_class_derives(tmp_path):
    """Gated DeltaNet of 30 key and value heads, key width 96 and value width 192: Q and K
    3840x2880, V and the gate 3840x5760, a and b 3840x30, O 5760x3840, a convolution of
    2880 + 2880 + 5760 channels x 4 (no bias), A_log and dt_bias (30 each), the output norm
    (192). With those four keys null, the class derives them: for the small model of
    kv_cache.json (hidden 64, 4 heads) 4 heads of 12 and of 24, a state of 192 x 4 + 4 x 12 x 24
    = 1,920 values a layer."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "olmo_hybrid.config.json")
    linear = next(x for x in ffncli.count(spec).layers if x.mixer == "linear")
    assert linear.attention == (2 * 3840 * 2880 + 2 * 3840 * 5760 + 2 * 3840 * 30
                                + 5760 * 3840 + 11520 * 4 + 60 + 192)
    full = next(x for x in ffncli.count(spec).layers if x.mixer == "full")
    assert full.norm == 2 * 3840 + 2 * 3840  # two layer norms; Q and K norms of 30 x 128
    small = _spec(tmp_path, "olmo_hybrid", hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, linear_num_key_heads=None, linear_num_value_heads=None,
                  linear_key_head_dim=None, linear_value_head_dim=None)
    state = {p.kind: p.state for p in kv_cache(small, 2).parts}
    assert state["linear"] == 1920


def test_zamba_counts_its_shared_block_once_and_every_user_caches_k_and_v(tmp_path):
    """Zamba: the shared block (Q, K, V 7424x7424: 16 heads of 464 on the stream and the
    embeddings, O 7424x3712; a SwiGLU of 14848; norms of 7424 and 3712) in layer 2 alone; each
    hybrid layer its own 3712x3712 projection. A Mamba of d_inner 7424: in_proj 3712x14848,
    conv 7424 x 4 + bias, x_proj 7424 x (232 + 2 x 16), dt_proj 232x7424 + bias, A_log
    7424x16, D, out_proj."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "zamba.config.json")
    layers = {x.kind: x for x in ffncli.count(spec).layers}
    mamba = (3712 * 14848 + 7424 * 5 + 7424 * 264 + 232 * 7424 + 7424 + 7424 * 16 + 7424
             + 7424 * 3712 + 3712)  # and its layer's norm
    block = 3 * 7424 * 7424 + 7424 * 3712 + 3 * 3712 * 14848 + 7424 + 3712
    own = 3712 * 3712
    assert {k: (x.count, x.total, x.ffn) for k, x in layers.items()} == {
        "mamba": (63, mamba, 0),
        "hybrid (holds the shared block)": (1, mamba + own + block, 3 * 3712 * 14848),
        "hybrid (reuses the shared block)": (12, mamba + own, 0)}
    small = _spec(tmp_path, "zamba", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=8, attention_hidden_size=None, attention_head_dim=None,
                  mamba_dt_rank=None,
                  layers_block_type=["mamba", "mamba", "hybrid"] + ["mamba"] * 4 + ["hybrid"])
    per_layer = {p.indices: (p.per_token, p.state) for p in kv_cache(small, 9).parts}
    # K and V of 2 heads of 2 x 64 / 4 = 32; the Mamba's conv 128 x 4 and state 128 x 16
    assert per_layer == {(0, 1, 3, 4, 5, 6): (0, 2560), (2,): (128, 2560), (7,): (128, 2560)}


def test_zamba2_blocks_in_turn_hold_the_adapters_of_their_layers(tmp_path):
    """Zamba2 with num_mem_blocks 2: its 9 hybrid layers use blocks 0, 1, 0, 1, ...; each
    block is held by its first layer with one LoRA pair (2560 x 128, 128 x 20480) on the FFN's
    gate and up for each of its layers (5 and 4), and with use_shared_attention_adapter three
    more (5120 x 128, 128 x 5120) a layer."""
    spec = _spec(tmp_path, "zamba2", num_mem_blocks=2, use_shared_attention_adapter=True)
    held = [x for x in ffncli.count(spec).layers if x.ffn]
    ffn, pair, qkv = 3 * 2560 * 10240, 2560 * 128 + 128 * 20480, 3 * 2 * 5120 * 128
    assert [(x.indices, x.ffn) for x in held] == [((6,), ffn + 5 * pair), ((12,), ffn + 4 * pair)]
    reuse = next(x for x in ffncli.count(spec).layers if x.kind.startswith("hybrid (reuses"))
    assert held[0].attention - reuse.attention == (3 * 5120 * 5120 + 5120 * 2560 + 5 * qkv)
    assert held[1].attention - reuse.attention == (3 * 5120 * 5120 + 5120 * 2560 + 4 * qkv)


def test_kimi_delta_attention_and_latent_attention_of_kimi_linear(tmp_path):
    """Kimi Linear (d 2304): a KDA layer's mixer is Q, K, V 2304x4096 (32 heads of 128), a
    convolution of 12288 x 4, the forget gate 2304x128 and 128x4096 with dt_bias 4096 and A_log
    32, beta 2304x32, the output gate 2304x128 and 128x4096, a norm of 128, O 4096x2304; its
    state the convolution's inputs and 32 matrices of 128 x 128. The latent layers: Q
    2304x6144 (32 x 192), KV_a 2304x576, its norm 512, KV_b 512x8192, O 4096x2304."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "kimi_linear.config.json")
    layers = {x.mixer: x for x in ffncli.count(spec).layers}
    kda = (3 * 2304 * 4096 + 12288 * 4 + 2304 * 128 + 128 * 4096 + 4096 + 32 + 2304 * 32
           + 2304 * 128 + 128 * 4096 + 128 + 4096 * 2304)
    assert kda == 39_514_272 and layers["linear"].attention == kda
    assert layers["full"].attention + layers["full"].norm == (
        2304 * 6144 + 2304 * 576 + 512 * 8192 + 4096 * 2304 + 512 + 2 * 2304)
    parts = {p.kind: p for p in kv_cache(spec, 9).parts}
    assert parts["linear"].state == 12288 * 4 + 32 * 128 * 128
    assert parts["mla"].per_token == 512 + 64
    nested = _spec(tmp_path, "kimi_linear", layer_types=None, linear_attn_config={
        "num_heads": 16, "head_dim": 64, "full_attn_layers": [2], "kda_layers": [1, 3]},
        num_hidden_layers=3, mlp_layer_types=None)
    assert [(k.mixer, k.ffn is not None) for k in nested.pattern] == [
        ("linear", True), ("full", False), ("linear", False)]  # layer 0 dense
    assert nested.pattern[0].mixer_spec.k_heads * nested.pattern[0].mixer_spec.k_head_dim == 1024


def test_lfm3_short_convolution_and_gated_attention(tmp_path):
    """LFM3 (d 2048): a conv layer's mixer is in_proj 2048x6144 (B, C, x), a depthwise
    convolution 2048 x 7 without bias, out_proj 2048x2048, its state 2048 x 7; an attention
    layer's Q 2048x2048, K and V 2048x512, O, norms of 128 on Q and K, a gate a head 2048x16.
    Four norms a layer, one after the embeddings, none after the last layer."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "lfm3.config.json")
    count = ffncli.count(spec)
    layers = {x.mixer: x for x in count.layers}
    assert layers["conv"].attention == 2048 * 6144 + 2048 * 7 + 2048 * 2048
    rows = {r.name: r.params for r in layers["full"].attention_rows}
    assert rows["output gate (per head)"] == 2048 * 16
    assert layers["full"].attention == 2 * 2048 * 2048 + 2 * 2048 * 512 + 2048 * 16
    assert layers["full"].norm == 4 * 2048 + 2 * 128
    assert count.groups["norms"] == 24 * 4 * 2048 + 11 * 256 + 2048  # 11 attention layers
    parts = {p.kind: p for p in kv_cache(spec, 300).parts}
    assert (parts["conv"].state, parts["conv"].per_token) == (2048 * 7, 0)
    assert parts["sliding"].cap == 255
    plain = ffncli.count(_spec(tmp_path, "lfm3", use_attention_gate=False,
                               use_sandwich_norm=False))
    assert count.total - plain.total == 11 * 2048 * 16 + 24 * 2 * 2048


def test_lara_mini_layers_and_its_shared_expert_without_gate():
    """LaraMini (d 1024): Gated DeltaNet of 8 key heads of 128 and 16 value heads of 128
    (qkv 1024x4096, z 1024x2048, a and b 1024x16, conv 4096 x 4, A_log and dt_bias 16, norm
    128, O 2048x1024); every FFN 128 experts of 512 (3 x 1024 x 512 each), a router 1024x128
    and one shared expert of 512 with no gate; top-4."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "lara_mini.config.json")
    layers = {x.mixer: x for x in ffncli.count(spec).layers}
    assert layers["linear"].attention == (1024 * 4096 + 1024 * 2048 + 2 * 1024 * 16 + 4096 * 4
                                          + 32 + 128 + 2048 * 1024)
    expert = 3 * 1024 * 512
    assert (layers["full"].ffn, layers["full"].ffn_active) == (
        128 * expert + 1024 * 128 + expert, 4 * expert + 1024 * 128 + expert)


def test_bailing_hybrid_full_rank_gates_and_a_gate_a_head_on_latent_attention():
    """Bailing hybrid (d 2560): its delta attention's forget gate f_proj and output gate g_proj
    are 2560x4096 each (32 heads of 128), beside Q, K, V 2560x4096, a convolution of 12288 x 4,
    dt_bias 4096, A_log 32, beta 2560x32, a norm of 128, O 4096x2560; its latent attention
    (Q 2560x6144, KV_a 2560x576, KV_b 512x8192, O 4096x2560) adds g_proj 2560x32."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "bailing_hybrid.config.json")
    layers = {x.mixer: x for x in ffncli.count(spec).layers}
    assert layers["linear"].attention == (3 * 2560 * 4096 + 12288 * 4 + 2 * 2560 * 4096 + 4096
                                          + 32 + 2560 * 32 + 128 + 4096 * 2560) == 63_049_888
    rows = {r.name: r.params for r in layers["full"].attention_rows}
    assert rows["W_gate (a scalar per head)"] == 2560 * 32
    assert layers["full"].attention == (2560 * 6144 + 2560 * 576 + 512 * 8192 + 4096 * 2560
                                        + 2560 * 32)


def test_recurrent_gemma_rg_lru_block_and_local_attention():
    """RecurrentGemma (d 2560): a recurrent block is linear_y, linear_x and linear_out 2560x2560
    with biases, a convolution 2560 x 4 with bias, the recurrence parameter (2560) and two
    block-diagonal gates of 10 heads of 256 x 256 with biases; its state the convolution's
    last 3 inputs and the recurrence (2560 each). Attention: Q, K, V, O 2560x2560, O's bias;
    over a window of 2048. The FFN: GeGLU of 7680 / 2 with biases."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "recurrent_gemma.config.json")
    layers = {x.mixer: x for x in ffncli.count(spec).layers}
    assert layers["linear"].attention == (3 * (2560 * 2560 + 2560) + 2560 * 5 + 2560
                                          + 2 * 10 * (256 * 256 + 256))
    assert layers["sliding"].attention == 4 * 2560 * 2560 + 2560
    assert layers["sliding"].ffn == 3 * 2560 * 3840 + 2 * 3840 + 2560
    parts = {p.kind: p for p in kv_cache(spec, 9).parts}
    assert parts["linear"].state == 2560 * 3 + 2560
    assert (parts["sliding"].cap, parts["sliding"].layers) == (2047, 8)


def test_xlstm_mlstm_layer_and_its_state(tmp_path):
    """xLSTM-7B (d 4096, 8 heads): Q and K 4096x2048 (0.5 x 4096), V and the output gate
    4096x4096, input and forget gates 4096x8 with biases, a norm of 4096, out_proj 4096x4096;
    the FFN 4096 x 2.667 = 10,924.03, rounded up to 10,944; the state of a head its 256 x 512
    matrix, a normalizer of 256 and one stabilizer."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "xlstm.config.json")
    (layer,) = ffncli.count(spec).layers
    assert layer.attention == 2 * 4096 * 2048 + 2 * 4096 * 4096 + 2 * (4096 * 8 + 8) + 4096 \
        + 4096 * 4096
    assert (spec.ffn.d_ff, layer.ffn) == (10944, 3 * 4096 * 10944)
    (part,) = kv_cache(spec, 9).parts
    assert (part.per_token, part.state) == (0, 8 * (256 * 512 + 256 + 1))
    r = _spec(tmp_path, "xlstm", ffn_proj_factor=2.5, ffn_round_up_to_multiple_of=256)
    assert r.ffn.d_ff == 10240  # 4096 x 2.5 exactly, already a multiple of 256


def test_rwkv_time_and_channel_mixing(tmp_path):
    """RWKV-4 (d 4096): time mixing is key, value, receptance and output 4096x4096, decay and
    first-token bonus (4096 each), three token-shift vectors; channel mixing (the FFN) is key
    4096x16384, value 16384x4096, receptance 4096x4096 and two token-shift vectors. Norms:
    two LayerNorms with biases a layer, the first block's pre_ln (as an embedding norm), the
    last. The state: five vectors of 4096 a layer."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "rwkv.config.json")
    count = ffncli.count(spec)
    (layer,) = count.layers
    assert layer.attention == 4 * 4096 * 4096 + 2 * 4096 + 3 * 4096
    assert layer.ffn == 2 * 4096 * 16384 + 4096 * 4096 + 2 * 4096
    assert count.groups["norms"] == 32 * 2 * 8192 + 8192 + 8192
    (part,) = kv_cache(spec, 9).parts
    assert (part.layers, part.state) == (32, 5 * 4096)
    assert layer.flops.ffn == 2 * (2 * 4096 * 16384 + 4096 * 4096)


def test_speech_models_count_their_language_model_and_name_the_rest(cli):
    """nemo_speechlm's text_config is a Nemotron-H, vibevoice_asr's a Qwen2: each counted as
    that type's config alone would be; every other part named as not counted."""
    for model_type, text_type, parts in (
            ("nemo_speechlm", "nemotron_h", ["audio tower (nemotron3_5_transcribe_audio)",
                                             "word timestamp (nemotron3_5_transcribe_word_"
                                             "timestamp)"]),
            ("vibevoice_asr", "qwen2", ["acoustic tokenizer encoder (vibevoice_acoustic_"
                                        "tokenizer_encoder)", "semantic tokenizer encoder "
                                        "(vibevoice_acoustic_tokenizer_encoder)"])):
        config = _config(model_type)
        doc = json.loads(cli("params", "--config", ZOO / "configs" / f"{model_type}.config.json",
                             "--json").out)
        assert doc["uncounted"] == parts + ["what joins them to the language model"]
        text = ffncli.count(spec_from_config(
            {**config["text_config"], "model_type": text_type}, "text_config"))
        assert doc["total_params"] == text.total


def test_inkling_text_side_convolutions_relative_logits_and_its_router():
    """Inkling (d 6144): a sliding layer's attention is Q 6144x8192 (64 heads of 128), K and V
    6144x2048 (16 kv heads), O, norms of 128 on Q and K; beside it short convolutions of 4 taps
    on K and V (2048 each) and on the stream (6144, twice), r_proj 6144 x (64 x 16) and a
    table 16 x 512 (the window). The FFN: 256 experts of 3072, 2 shared ones, the router
    6144 x (256 + 2) and its scale; its cache K and V and the four convolutions' inputs."""
    spec = ffncli.load_spec(config=ZOO / "configs" / "inkling_text.config.json")
    layers = {x.mixer: x for x in ffncli.count(spec).layers}
    side = 2 * 2048 * 4 + 2 * 6144 * 4 + 6144 * 64 * 16 + 16 * 512
    assert layers["sliding"].attention == 2 * 6144 * 8192 + 2 * 6144 * 2048 + side
    expert = 3 * 6144 * 3072
    assert layers["sliding"].ffn == 256 * expert + 6144 * 258 + 1 + 2 * expert
    assert layers["sliding"].ffn_active == 6 * expert + 6144 * 258 + 1 + 2 * expert
    parts = {p.kind: p for p in kv_cache(spec, 9).parts}
    assert (parts["sliding"].per_token, parts["sliding"].state) == (
        2 * 2048, 2 * (2048 + 6144) * 4)
