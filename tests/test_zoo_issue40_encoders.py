"""The counting parts issue 40's encoders and seq2seq types added, each against a value computed
by hand from the shapes transformers 5.25 builds (modeling_*.py), not only the zoo's totals:
ALBERT's shared layers, DeBERTa's bias-free key, Longformer's global projections, RoFormer's
rotary table, GTE's down-only bias, TrOCR's cross-attention without an encoder."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.model import count

CONFIGS = DATA / "zoo" / "configs"


def _spec(model_type, tmp_path=None, **changes):
    path = CONFIGS / f"{model_type}.config.json"
    if changes:
        assert tmp_path is not None
        path, config = tmp_path / "config.json", json.loads(path.read_text())
        path.write_text(json.dumps({**config, **changes}))
    return ffncli.load_spec(config=path)


def _layer(counted, kind="encoder"):
    (layer,) = [x for x in counted.layers if x.kind == kind]
    return layer


# AlbertLayer, 4096 wide, FFN 16384: Q, K, V, dense with biases; ffn and ffn_output; 2 norms.
ALBERT_LAYER = 4 * (4096 * 4096 + 4096) + (2 * 4096 * 16384 + 16384 + 4096) + 2 * 2 * 4096
ALBERT_REST = 30000 * 128 + 512 * 128 + 2 * 128 + 2 * 128 + (128 * 4096 + 4096) \
    + (4096 * 4096 + 4096)  # word, positions, token types, norm, projection, pooler


def test_albert_counts_its_shared_layer_once_and_runs_it_every_time():
    counted = count(_spec("albert"))
    layer = _layer(counted, "shared encoder")
    assert (layer.count, layer.repeats, layer.total) == (1, 12, ALBERT_LAYER)
    assert ALBERT_LAYER == 201_379_840  # the zoo's one layer
    assert counted.total == ALBERT_LAYER + ALBERT_REST == 222_595_584
    assert counted.flops_ffn == 12 * 2 * 2 * 4096 * 16384


def test_albert_groups_each_hold_their_own_layers(tmp_path):
    counted = count(_spec("albert", tmp_path, num_hidden_groups=2, inner_group_num=2))
    layer = _layer(counted, "shared encoder")
    assert (layer.count, layer.repeats) == (4, 6)  # 12 runs of 2 layers over 4 distinct
    assert counted.total == 4 * ALBERT_LAYER + ALBERT_REST


def test_deberta_v1_has_no_key_bias():
    layer = _layer(count(_spec("deberta")))
    # in_proj 768 -> 3 x 768 without bias, q_bias and v_bias, the output dense with bias
    assert layer.attention == 3 * 768 * 768 + 2 * 768 + 768 * 768 + 768
    assert {r.name: r.params for r in layer.attention_rows}["W_K"] == 768 * 768


def test_deberta_v1_relative_table(tmp_path):
    plain = count(_spec("deberta")).total
    relative = count(_spec("deberta", tmp_path, relative_attention=True, pos_att_type=[],
                           max_relative_positions=-1)).total
    assert relative - plain == 2 * 512 * 768  # 2 x max_position_embeddings rows


def test_longformer_layers_have_global_q_k_and_v():
    layer = _layer(count(_spec("longformer")))
    assert layer.attention == 7 * (768 * 768 + 768)
    assert layer.total == 8_859_648  # the zoo's layer


def test_roformer_rotary_table_is_head_dim_wide():
    rows = {r.name: (r.shape, r.params) for r in count(_spec("roformer")).other_rows}
    assert rows["position embeddings"] == ("1536 x 64", 1536 * 64)


def test_gte_ffn_has_a_bias_on_its_down_projection_only():
    layer = _layer(count(_spec("gte")))
    assert layer.ffn == 2 * 768 * 3072 + 3072 * 768 + 768
    assert [r.name for r in layer.ffn_rows] == ["W (gate, activated)", "V (up, linear)", "W2",
                                                "b2"]


def test_bert_generation_with_cross_attention(tmp_path):
    plain = count(_spec("bert-generation"))
    cross = count(_spec("bert-generation", tmp_path, add_cross_attention=True))
    # BertAttention again (Q, K, V, dense with biases) and its output LayerNorm, 24 layers
    assert cross.total - plain.total == 24 * (4 * (1024 * 1024 + 1024) + 2 * 1024)


HOSTILE = [
    ("albert", {"num_hidden_groups": 5},
     "key 'num_hidden_groups': expected a divisor of num_hidden_layers (12), got 5"),
    ("deberta", {"relative_attention": True, "pos_att_type": ["c2p"]},
     "key 'pos_att_type': expected empty (its per-layer position projections are not read), "
     "got ['c2p']"),
    ("deberta", {"talking_head": True},
     "key 'talking_head': expected false (the talking-head projections are not read), got "
     "True"),
    ("convbert", {"num_groups": 2},
     "key 'num_groups': expected 1 (grouped FFN projections are not read), got 2"),
    ("funnel", {"block_repeats": [1, 2, 1]},
     "key 'block_repeats': expected 1 for every block (repeated blocks are not read), got "
     "[1, 2, 1]"),
    ("roc_bert", {"concat_input": False},
     "key 'concat_input': expected true (tables summed instead of joined are not read), got "
     "False"),
    ("squeezebert", {"v_groups": 2}, "key 'v_groups': expected q_groups (4), got 2"),
    ("squeezebert", {"q_groups": 5, "k_groups": 5, "v_groups": 5},
     "key 'q_groups': expected a divisor of hidden_size and intermediate_size, got 5"),
    ("encoder-decoder", {"decoder": {"model_type": "gpt2"}},
     "key 'decoder': expected a 'bert' config (other encoders and decoders are not read), got "
     "{'model_type': 'gpt2'}"),
    ("encoder-decoder", {"decoder": {**json.loads((CONFIGS / "encoder-decoder.config.json")
                                        .read_text())["decoder"], "add_cross_attention": False}},
     "decoder: key 'add_cross_attention': expected true (the decoder attends to the encoder), "
     "got False"),
    ("reformer", {"axial_pos_embds_dim": [64, 64]},
     "key 'axial_pos_embds_dim': expected widths summing to hidden_size (256), got [64, 64]"),
    ("reformer", {"attn_layers": ["local", "global"]},
     "key 'attn_layers': expected a list of layer types (local, lsh), got ['local', 'global']"),
    ("perceiver", {"v_channels": 512},
     "key 'v_channels': expected null or d_latents (1,280), got 512"),
    ("mobilebert", {"use_bottleneck": False},
     "key 'use_bottleneck': expected true (MobileBERT without bottlenecks is not read), got "
     "False"),
    ("trocr", {"cross_attention_hidden_size": 768},
     "key 'cross_attention_hidden_size': expected null or d_model (1,024), got 768"),
    ("switch_transformers", {"num_sparse_encoder_layers": 13},
     "key 'num_sparse_encoder_layers': expected at most num_layers (12), got 13"),
    ("t5gemma", {"decoder": {**json.loads((CONFIGS / "t5gemma.config.json").read_text())[
        "decoder"], "intermediate_size": 4096}},
     "key 'decoder': expected the encoder's widths, heads and FFN (stacks of different shapes "
     "are not read), got {"),
]


@pytest.mark.parametrize(("model_type", "changes", "message"), HOSTILE,
                         ids=[m for m, _, _ in HOSTILE])
def test_configs_these_readers_refuse(cli, tmp_path, model_type, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((CONFIGS / f"{model_type}.config.json")
                                             .read_text()), **changes}))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "")
    assert r.err.count("\n") == 1 and r.err.startswith(f"error: {path}: {message}"), r.err


def test_led_has_global_projections_in_its_encoder_alone_and_positions_per_stack():
    counted = count(_spec("led"))
    plain = 4 * (1024 * 1024 + 1024)  # BART's Q, K, V, O with biases
    assert _layer(counted).attention == plain + 3 * (1024 * 1024 + 1024)
    assert _layer(counted, "decoder").attention == 2 * plain  # self and cross, no globals
    rows = {r.name: r.params for r in counted.other_rows}
    assert (rows["position embeddings"], rows["decoder position embeddings"]) == (
        16384 * 1024, 1024 * 1024)


@pytest.mark.parametrize(("model_type", "sparse", "experts", "top_k", "expert"), [
    # T5's DenseReluDense without biases; the router d -> experts without bias
    ("switch_transformers", [1, 5, 9], 8, 1, 2 * 768 * 2048),
    # M2M-100's fc1 and fc2 with biases
    ("nllb-moe", [3, 7, 11], 128, 2, 2 * 1024 * 4096 + 4096 + 1024),
])
def test_sparse_layers_of_both_stacks(model_type, sparse, experts, top_k, expert):
    spec = _spec(model_type)
    for kinds in (spec.encoder_pattern, spec.pattern):
        assert [i for i, k in enumerate(kinds) if k.ffn is None] == sparse
    counted = count(spec)
    d = spec.d_model
    layer = _layer(counted)
    assert (layer.count, layer.ffn) == (3, experts * expert + d * experts)
    assert layer.ffn_active == top_k * expert + d * experts
    assert _layer(counted, "dense encoder").ffn == expert
    assert counted.total - counted.active == 6 * (experts - top_k) * expert


def test_t5gemma_stacks_have_their_own_word_tables_and_two_cross_attention_norms():
    counted = count(_spec("t5gemma"))
    rows = {r.name: r.params for r in counted.other_rows}
    assert rows["word embeddings"] == rows["decoder word embeddings"] == 256000 * 2304
    # Gemma 2's four RMSNorms a layer; the decoder's cross-attention adds a pre and a post
    assert (_layer(counted).norm, _layer(counted, "decoder").norm) == (4 * 2304, 6 * 2304)
    assert _layer(counted, "decoder").total == 92_026_368  # the zoo's decoder layer


def test_trocr_decoder_layers_attend_to_an_encoder_it_does_not_hold():
    spec = _spec("trocr")
    counted = count(spec)
    assert spec.layers.encoder == 0
    layer = _layer(counted, "decoder")
    assert layer.attention == 2 * 4 * (1024 * 1024 + 1024)
    assert layer.norm == 3 * 2 * 1024


def test_xmod_has_a_bottleneck_adapter_per_language_after_each_ffn(tmp_path):
    adapter = (768 * 384 + 384) + (384 * 768 + 768)  # dense1 and dense2, with biases
    bert_ffn = 2 * 768 * 3072 + 3072 + 768
    assert _layer(count(_spec("xmod"))).ffn == bert_ffn + adapter  # en_XX alone
    three = _layer(count(_spec("xmod", tmp_path, languages=["en_XX", "de_DE", "fr_XX"])))
    assert (three.ffn, three.ffn_active) == (bert_ffn + 3 * adapter, bert_ffn + 3 * adapter)
    assert three.flops.ffn == 2 * (2 * 768 * 3072 + 2 * 768 * 384)  # one language's adapter


def test_convbert_attention_and_its_span_convolution():
    layer = _layer(count(_spec("convbert")))
    q, heads, k = 384, 6, 9  # 12 heads / head_ratio 2, each (768 / 6) / 2 wide
    attention = 3 * (768 * q + q) + (q * 768 + 768)  # Q, K, V and attention's half of W_O
    conv = (768 * k + 768 * q + q) + (q * heads * k + heads * k) + (768 * q + q) + q * 768
    assert layer.attention == attention + conv
    assert layer.total == 6_820_278  # the zoo's layer


def test_funnel_relative_attention():
    layer = _layer(count(_spec("funnel")))
    # q_head without bias, k_head, v_head, post_proj with biases; r_kernel 768 x 12 x 64;
    # r_w, r_r, r_s biases 12 x 64 each; seg_embed 2 x 12 x 64
    assert layer.attention == 768 * 768 + 3 * (768 * 768 + 768) + 768 * 768 + 5 * 768
    assert (layer.count, layer.total) == (14, 7_680_768)  # 3 blocks of 4, 2 upsampling


def _rows(counted):
    return {r.name: r.params for r in counted.other_rows}


def test_fnet_has_no_attention_and_an_embedding_projection():
    counted = count(_spec("fnet"))
    assert (_layer(counted).attention, _layer(counted).norm) == (0, 2 * 2 * 768)
    assert _rows(counted)["embedding projection (with bias)"] == 768 * 768 + 768


def test_esmc_final_norm_has_no_bias():
    counted = count(_spec("esmc"))
    assert _rows(counted)["final norm"] == 2560
    # two LayerNorms with biases, bias-free norms over all of Q (40 x 64) and of K
    assert _layer(counted).norm == 2 * 2 * 2560 + 2 * 2560


def test_luke_entity_embeddings_and_entity_aware_queries(tmp_path):
    counted = count(_spec("luke"))
    rows = _rows(counted)
    assert (rows["entity embeddings"], rows["entity projection"]) == (500000 * 256, 256 * 768)
    assert (rows["entity position embeddings"], rows["entity embedding norm"]) == (
        512 * 768, 2 * 768)
    unaware = count(_spec("luke", tmp_path, use_entity_aware_attention=False))
    assert counted.total - unaware.total == 12 * 3 * (768 * 768 + 768)


def test_roc_bert_joins_its_shape_and_pronunciation_tables():
    rows = count(_spec("roc_bert")).other_rows
    assert [(r.shape, r.params) for r in rows if r.name.startswith(("side", "joined"))] == [
        ("24858 x 512", 24858 * 512), ("910 x 768", 910 * 768),
        ("2048 x 768", (768 + 512 + 768) * 768 + 768)]


def test_fsmt_stacks_have_their_own_vocabularies_and_the_head_is_the_decoders(tmp_path):
    counted = count(_spec("fsmt", tmp_path, src_vocab_size=1000, tgt_vocab_size=3000))
    rows = _rows(counted)
    assert (rows["word embeddings"], rows["decoder word embeddings"]) == (1000 * 1024,
                                                                         3000 * 1024)
    assert counted.groups["head"] == 3000 * 1024  # output_projection, untied
    assert rows["position embeddings"] == rows["decoder position embeddings"] == \
        (1024 + 1 + 1) * 1024  # max_position_embeddings + pad_token_id + 1


def test_pegasus_x_three_norms_in_both_stacks_and_global_tokens():
    counted = count(_spec("pegasus_x"))
    assert _layer(counted).norm == _layer(counted, "decoder").norm == 3 * 2 * 1024
    assert _rows(counted)["extra embedding rows"] == 32 * 1024


def test_prophetnet_relative_projection_is_in_decoder_self_attention_alone():
    counted = count(_spec("prophetnet"))
    plain = 4 * (1024 * 1024 + 1024)
    assert _layer(counted).attention == plain
    assert _layer(counted, "decoder").attention == 2 * plain + 1024 * 32 * 16 + 32 * 16
    assert _rows(counted)["extra embedding rows"] == 2 * 1024


def test_nystromformer_value_convolution(tmp_path):
    layer = _layer(count(_spec("nystromformer")))
    assert layer.attention == 4 * (768 * 768 + 768) + 12 * 65  # a 65 x 1 kernel per head
    none = _layer(count(_spec("nystromformer", tmp_path, conv_kernel_size=None)))
    assert none.attention == 4 * (768 * 768 + 768)


def test_squeezebert_grouped_projections():
    layer = _layer(count(_spec("squeezebert")))
    # Q, K, V in 4 groups, the attention's output in 1; the FFN's two in 4; biases whole
    assert layer.attention == 3 * (768 * 768 // 4 + 768) + 768 * 768 + 768
    assert layer.ffn == (768 * 3072 // 4 + 3072) + (3072 * 768 // 4 + 768)
    assert layer.flops.ffn == 2 * 2 * 768 * 3072 // 4
    assert layer.total == 2_221_824  # the zoo's layer


def test_t5gemma2_counts_its_language_model_with_merged_attention():
    spec = _spec("t5gemma2")
    counted = count(spec)
    # Gemma 3's layer: Q 2304 -> 8 x 256, K and V -> 4 x 256, O, no biases; SwiGLU of 9216;
    # four RMSNorms; a 256-wide norm on Q and on K. The decoder's merged attention adds none.
    layer = (2304 * 2048 * 2 + 2 * 2304 * 1024) + 3 * 2304 * 9216 + 4 * 2304 + 2 * 256
    assert _layer(counted).total == _layer(counted, "decoder").total == layer == 77_866_496
    # the zoo's seq2seq class less its vision tower: 12 SigLIP layers, patch and position
    # embeddings, post-norm, pooling head, and the projector with its norm
    vision = 12 * 7_087_872 + (3 * 16 * 16 * 768 + 768) + 196 * 768 + 2 * 768 + 7_087_104 \
        + 768 * 2304 + 768
    truth = 4_747_846_400
    assert counted.total == truth - vision == 262208 * 2304 + 2304 + 52 * layer + 2 * 2304
    assert spec.uncounted[0] == "vision tower (siglip_vision_model)"


def test_encoder_decoder_of_two_berts():
    counted = count(_spec("encoder-decoder"))
    rows = _rows(counted)
    tables = 30522 * 768 + 512 * 768 + 2 * 768  # word, position, token-type: each stack's
    assert rows["word embeddings"] + rows["position embeddings"] \
        + rows["token-type embeddings"] == tables
    assert counted.groups["embeddings"] == 2 * tables
    # BertLMHeadModel's head: transform dense and LayerNorm, the tied decoder's bias
    assert counted.groups["head"] == (768 * 768 + 768) + 2 * 768 + 30522
    # the decoder's layers: BERT's and a cross-attention with its output LayerNorm
    assert _layer(counted, "decoder").total == _layer(counted).total + 4 * (768 * 768 + 768) \
        + 2 * 768


def test_reformer_local_and_lsh_layers_axial_positions_and_wide_final_norm(tmp_path):
    counted = count(_spec("reformer"))
    ffn, norms = (256 * 512 + 512) + (512 * 256 + 256), 2 * 2 * 256
    assert _layer(counted, "local encoder").total == 4 * 256 * 768 + ffn + norms
    assert _layer(counted, "lsh encoder").total == 3 * 256 * 768 + ffn + norms  # no W_K
    rows = _rows(counted)
    assert rows["axial position embeddings"] == 64 * 64 + 64 * 192
    assert rows["final norm"] == 2 * 2 * 256
    learned = count(_spec("reformer", tmp_path, axial_pos_embds=False))
    assert _rows(learned)["position embeddings"] == 4096 * 256


def test_perceiver_latents_cross_attend_to_the_inputs(tmp_path):
    counted = count(_spec("perceiver"))
    d, n = 1280, 768  # d_latents, d_model (the inputs)
    cross = (256 * d  # the latents
             + (d * n + n) + 2 * (n * n + n) + (n * d + d)  # Q from latents; K, V; O to d
             + 2 * (d * d + d)  # the MLP, widening 1
             + 2 * d + 2 * n + 2 * d)  # LayerNorms: latents, inputs, before the MLP
    assert counted.total == 26 * 9_843_200 + cross
    twice = count(_spec("perceiver", tmp_path, num_blocks=2))
    assert twice.total == counted.total and _layer(twice, "shared encoder").repeats == 2


def test_mobilebert_bottlenecks_and_stacked_ffns(tmp_path):
    counted = count(_spec("mobilebert"))
    layer = _layer(counted)
    t, h, i = 128, 512, 512  # true_hidden_size, hidden_size, intermediate_size
    one_ffn = (t * i + i) + (i * t + t)
    assert layer.ffn == 4 * one_ffn  # num_feedforward_networks
    assert layer.flops.ffn == 4 * 2 * 2 * t * i
    # Q, K from t; V from the outer h (use_bottleneck_attention false); O; each with bias
    assert layer.attention + layer.other - 2 * ((h * t + t) + 2 * t) - ((t * h + h) + 2 * h) \
        == 3 * (t * t + t) + (h * t + t)
    assert layer.norm == (1 + 4) * 2 * t  # the attention's and each FFN's NoNorm
    assert layer.total == 842_240  # the zoo's layer
    rows = _rows(counted)
    assert (rows["embedding projection (with bias)"], rows["position embeddings"]) == (
        3 * 128 * h + h, 512 * h)
    through = _layer(count(_spec("mobilebert", tmp_path, use_bottleneck_attention=True,
                                 key_query_shared_bottleneck=False)))
    assert layer.total - through.total == (h * t + t) + 2 * t + (h - t) * t


@pytest.mark.parametrize(("model_type", "what", "reason"), [
    ("gte", "FFN", "a bias on the down projection alone"),
    ("xmod", "FFN", "language adapters after the FFN"),
    ("mobilebert", "FFN", "FFNs in sequence in each layer"),
    ("squeezebert", "FFN", "projections as grouped 1x1 convolutions"),
    ("switch_transformers", "mixture of experts", "a mixture of experts in some layers"),
])
def test_ffns_the_engine_does_not_compute_are_refused(cli, model_type, what, reason):
    """params counts them; the engine's FFN would leave a part out."""
    path = CONFIGS / f"{model_type}.config.json"
    assert cli("params", "--config", path).code == 0
    r = cli("relu-stats", "--config", path, "--random", "2")
    assert (r.code, r.out) == (2, "")
    assert r.err.endswith(f"run, permute-check and relu-stats do not compute this {what} yet "
                          f"({reason}); params counts it exactly\n")


MINE = sorted(["albert", "deberta", "roformer", "longformer", "gte", "bert-generation", "led",
               "switch_transformers", "nllb-moe", "t5gemma", "trocr", "xmod", "convbert",
               "funnel", "fnet", "esmc", "luke", "roc_bert", "fsmt", "pegasus_x", "prophetnet",
               "nystromformer", "squeezebert", "t5gemma2", "encoder-decoder", "reformer",
               "perceiver", "mobilebert"])


@pytest.mark.parametrize("model_type", MINE)
def test_the_tensor_inventory_is_whole_or_fine_tuning_memory_is_refused(cli, model_type):
    """LoRA and fine-tuning memory are counted over the tensor inventory, which does not
    itemise these parts yet: a spec with one is refused by --train, the others sum exactly."""
    from ffncli.counting.tensors import tensors, unitemised

    spec = _spec(model_type)
    parts = unitemised(spec)
    r = cli("params", "--config", CONFIGS / f"{model_type}.config.json", "--train", "full")
    if not parts:
        assert sum(t.numel * t.count for t in tensors(spec)) == count(spec).total
        assert r.code == 0, r.err
        return
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {spec.name}: option --train: the memory of fine-tuning it is not "
                     f"counted yet (the tensor inventory lacks {', '.join(parts)}); params "
                     "counts its parameters exactly\n")


def test_the_inventory_names_what_it_lacks():
    from ffncli.counting.tensors import unitemised

    assert unitemised(_spec("albert")) == ("layers.shared",)
    assert unitemised(_spec("prophetnet")) == ("attention.relative_projection",
                                               "embeddings.extra_rows")
    assert unitemised(_spec("bert-generation")) == ()
