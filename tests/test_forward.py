"""The whole-model forward against PyTorch's own states (tests/data/forward, made by
tests/fixtures/make_forward.py with transformers), the layer-major walk and its spill file, and
bad checkpoints."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from helpers.forward_cases import IDS, assert_close, capture, checkpoint, nan_at
from helpers.installed_models import minilm_path, smollm2_path

from ffncli.base.validate import Keys
from ffncli.compute.forward import families, layer, ops, transformer
from ffncli.compute.forward import walk as walk_module
from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import batches, hidden_states, walk, walk_variants
from ffncli.errors import ConfigError, InputError, SpecError, WeightsError
from ffncli.jobs.resolve import resolve_spec

FORWARD = Path(__file__).parent / "data" / "forward"
TINY = ["bert", "roberta", "distilbert", "gpt2", "llama", "llama-rope3", "mistral", "qwen2",
        "mixtral", "qwen3", "gemma",
        # the config flags: GPT-2's scale_attn_by_inverse_layer_idx set and left out, Qwen2's
        # window on layers max_window_layers.. and use_sliding_window left out (off)
        "gpt2-layer-scale", "gpt2-scale-default", "qwen2-window", "qwen2-window-default"]
PACKAGED = {"minilm": minilm_path(), "smollm2": smollm2_path()}  # None: not installed


def read_ids(case: str) -> list[np.ndarray]:
    lines = (FORWARD / case / "ids.txt").read_text().splitlines()
    return [np.array(line.split(), dtype=np.int64) for line in lines if line.strip()]


def weights_of(case: str) -> Path:
    if case not in PACKAGED:
        return FORWARD / case / "model.safetensors"
    path = PACKAGED[case]
    if path is None:
        pytest.skip(f"the {case} package is not installed")
    return path


def load(case: str, dtype: type = np.float32) -> transformer.Transformer:
    weights = weights_of(case)
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    return open_transformer(spec, weights, np.dtype(dtype))


# ---------------------------------------------------------------------------------------------
# Against transformers.


@pytest.mark.slow
@pytest.mark.parametrize("case", TINY + list(PACKAGED))
def test_states_match_pytorch(case):
    model = load(case)
    expected = np.load(FORWARD / case / "expected.npz", allow_pickle=False)
    layers = sorted(int(k.removeprefix("layer")) for k in expected.files if k != "final")
    got, final = hidden_states(model, read_ids(case), layers)
    for i in layers:
        assert_close(got[i], expected[f"layer{i}"], f"{case} layer {i}")
    assert_close(final, expected["final"], f"{case} final")


def test_a_wrong_setting_is_seen():
    """The comparison can fail: llama's rope_theta changed from 500 to 10000 moves layer 1."""
    model = load("llama")
    model.rope = ops.Rope(ops.rope_frequencies(
        Keys({"rope_theta": 10000.0}, "test"), model.head_dim, 10000.0))
    expected = np.load(FORWARD / "llama" / "expected.npz")
    got, _ = hidden_states(model, read_ids("llama"), [1])
    with pytest.raises(AssertionError):
        assert_close(got[1], expected["layer1"], "llama layer 1")


def test_float64_matches_too():
    expected = np.load(FORWARD / "gpt2" / "expected.npz")
    got, final = hidden_states(load("gpt2", np.float64), read_ids("gpt2"), [1])
    assert got[1].dtype == np.float64
    assert_close(got[1], expected["layer1"], "gpt2 float64 layer 1")


def test_queries_a_few_at_a_time_give_the_same_states(monkeypatch):
    """Long sequences are attended a block of queries at a time; with one query per block
    (and the sliding window cutting the keys of each), Mistral still matches."""
    monkeypatch.setattr(layer, "SCORE_ELEMENTS", 1)
    expected = np.load(FORWARD / "mistral" / "expected.npz")
    got, final = hidden_states(load("mistral"), read_ids("mistral"), [0, 1])
    assert_close(got[1], expected["layer1"], "mistral layer 1")
    assert_close(final, expected["final"], "mistral final")


def test_a_sharded_index_reads_like_the_single_file(tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(FORWARD / "bert" / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, tmp_path / file)
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_bytes((FORWARD / "bert" / "config.json").read_bytes())
    spec = resolve_spec(None, None, weights=tmp_path, weights_describe=True)
    model = open_transformer(spec, tmp_path, np.dtype(np.float32))
    got, final = hidden_states(model, read_ids("bert"), [1])
    assert_close(final, np.load(FORWARD / "bert" / "expected.npz")["final"], "sharded bert")


# ---------------------------------------------------------------------------------------------
# Pieces against independent oracles.


@pytest.mark.slow
def test_embedding_rows_are_read_alone_as_the_whole_table_holds_them(tmp_path):
    """read_tensor(rows=...) and gguf.dequantised(rows=...) give the rows of the whole tensor,
    in the order asked (F32 and F16 safetensors; SmolLM2's Q8_0 token_embd)."""
    from safetensors.numpy import save_file

    from ffncli.formats.safetensors import read_header, read_tensor

    table = np.random.default_rng(3).normal(size=(50, 7))
    save_file({"a": table.astype(np.float32), "b": table.astype(np.float16)},
              tmp_path / "t.safetensors")
    header = read_header(tmp_path / "t.safetensors")
    rows = np.array([49, 0, 7, 7, 20])
    for name in ("a", "b"):
        whole = read_tensor(header, header.tensors[name])
        assert np.array_equal(read_tensor(header, header.tensors[name], rows=rows), whole[rows])
    if PACKAGED["smollm2"] is not None:
        from ffncli.formats.gguf import dequantised
        from ffncli.formats.gguf import read_header as gguf_header

        gguf = gguf_header(PACKAGED["smollm2"])
        embd = gguf.tensors["token_embd.weight"]
        rows = np.array([49151, 0, 1234])
        assert np.array_equal(dequantised(gguf, embd, rows), dequantised(gguf, embd)[rows])


def test_unpermute_undoes_llama_cpp_converter():
    """convert_hf_to_gguf.py's permute, as written there, then ours: the identity."""
    def permute(w: np.ndarray, n_head: int) -> np.ndarray:
        return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
                .swapaxes(1, 2).reshape(w.shape))

    w = np.arange(3 * 8 * 5, dtype=np.float32).reshape(24, 5)
    assert np.array_equal(families.unpermute(permute(w, 3), 3), w)
    b = np.arange(24, dtype=np.float32)
    assert np.array_equal(families.unpermute(permute(b, 3), 3), b)
    assert not np.array_equal(permute(w, 3), w)


def test_roberta_positions_skip_padding_as_transformers_does():
    """create_position_ids_from_input_ids, per sequence: cumsum(id != pad) * (id != pad) + pad."""
    model = load("roberta")
    pad = model.pad
    seqs = [np.array([5, pad, 7, 8]), np.array([pad, 9]), np.array([3, 4, 5])]
    ids = np.concatenate(seqs)
    positions = np.concatenate([np.arange(s.size) for s in seqs])
    want = np.concatenate([np.cumsum(s != pad) * (s != pad) + pad for s in seqs])
    assert np.array_equal(model._rows_of_positions(ids, positions), want)


def test_rope_scaling_linear_divides_every_frequency():
    plain = ops.rope_frequencies(Keys({"rope_theta": 500.0}, "t"), 16, 1e4)
    linear = ops.rope_frequencies(Keys(
        {"rope_theta": 500.0, "rope_scaling": {"type": "linear", "factor": 4.0}}, "t"), 16, 1e4)
    assert np.allclose(plain, 500.0 ** (-np.arange(0, 16, 2) / 16), rtol=1e-6)
    assert np.allclose(linear, plain / 4, rtol=1e-7)


def test_rope_theta_under_rope_parameters_as_transformers_5_writes_it():
    """transformers 5 keeps rope_theta inside rope_parameters (no top-level key)."""
    settings = Keys({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}, "t")
    got = ops.rope_frequencies(settings, 16, 1e4)
    np.testing.assert_allclose(got, 500.0 ** (-np.arange(0, 16, 2) / 16), rtol=1e-6)
    linear = Keys({"rope_parameters": {"rope_type": "linear", "rope_theta": 500.0,
                                       "factor": 4.0}}, "t")
    np.testing.assert_allclose(ops.rope_frequencies(linear, 16, 1e4),
                               500.0 ** (-np.arange(0, 16, 2) / 16) / 4, rtol=1e-6)


def test_layer_norm_epsilon_on_rows_of_almost_no_variance():
    """A constant row gives its bias (0 / sqrt(eps), not 0 / 0); on a row whose variance
    (5e-7) is below eps (1e-5) eps decides the scale: (x - mean) / sqrt(var + eps) * w + b."""
    x = np.array([[2.0, 2.0, 2.0, 2.0], [1.0, 1.001, 0.999, 1.0]])
    w, b = np.array([1.0, 2.0, 0.5, 1.5]), np.array([0.1, 0.0, -0.2, 0.3])
    eps = 1e-5
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(var + eps) * w + b
    got = ops.layer_norm(x, w, b, eps, np.empty_like(x), np.empty_like(x))
    np.testing.assert_allclose(got[0], b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)  # without eps: x 4.6


def test_softmax_of_large_scores_is_finite():
    """Scores of +-1000 overflow exp in float32 (inf / inf, 0 / 0) unless the row's maximum is
    taken away first: exp(s - max) / sum(exp(s - max))."""
    s = np.array([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1003.0]], dtype=np.float32)
    shifted = s.astype(np.float64) - s.max(axis=1, keepdims=True)
    want = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    got = ops.softmax_(s)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_softmax_in_place_and_the_causal_mask():
    s = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    want = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    assert ops.softmax_(s) is s
    assert np.allclose(s, want, rtol=1e-6)
    mask = ops.causal_mask(2, 2, 4, 2)  # queries 2 and 3 of keys 0..3, a window of 2
    assert mask is not None
    assert (mask == 0).tolist() == [[False, True, True, False], [False, False, True, True]]
    assert ops.causal_mask(3, 1, 4, None) is None  # the last query sees every key


# ---------------------------------------------------------------------------------------------
# The walk: batches, layers computed, memory.


@pytest.mark.parametrize("case", ["bert", "llama"])
def test_a_sequence_gives_the_same_states_alone_and_in_any_batch(case):
    model, seqs = load(case), read_ids(case)
    alone = [hidden_states(model, [s], [0, 1]) for s in seqs]
    for batch_tokens in (1, 8, 10**6):
        got, final = hidden_states(model, seqs, [0, 1], batch_tokens=batch_tokens)
        start = 0
        for s, (layers, last) in zip(seqs, alone, strict=True):
            rows = slice(start, start + s.size)
            for i in (0, 1):
                np.testing.assert_allclose(got[i][rows], layers[i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(final[rows], last, rtol=1e-5, atol=1e-5)
            start += s.size


def test_batches_are_cut_before_the_sequence_that_would_overflow():
    """Hand-counted layouts: a batch of exactly batch_tokens is one batch; a new batch starts
    with its first sequence's tokens counted once; a longer sequence is a batch alone."""
    assert batches([3, 5], 8) == [(0, 2)]
    assert batches([5, 4, 4], 8) == [(0, 1), (1, 3)]
    assert batches([2, 10, 3, 3, 2], 8) == [(0, 1), (1, 2), (2, 5)]
    assert batches([4096, 1]) == [(0, 1), (1, 2)]  # BATCH_TOKENS = 4096
    assert batches([4095, 1, 1]) == [(0, 2), (2, 3)]
    assert batches([]) == []


def test_the_final_state_is_the_last_layers_whatever_layers_are_chosen():
    """hidden_states asks for layer 0 only: the final state is still after layer 1 and ln_f."""
    expected = np.load(FORWARD / "gpt2" / "expected.npz")
    got, final = hidden_states(load("gpt2"), read_ids("gpt2"), [0])
    assert list(got) == [0]
    assert_close(got[0], expected["layer0"], "gpt2 layer 0")
    assert_close(final, expected["final"], "gpt2 final after layer 0 only chosen")


@pytest.mark.parametrize("case", ["bert", "llama"])
@pytest.mark.parametrize("alike", [0, 1])
def test_variants_share_what_is_alike_and_end_as_their_own_walks(case, alike):
    """Three variants, the second with its FFN doubled from layer ``alike`` on: the walk
    computes the layers before it once, yet every variant ends as a walk of that variant
    alone, bit for bit (post-norm BERT and pre-norm LLaMA)."""
    model, ids = load(case), read_ids(case)

    def doubled(block: layer.Block):
        def ffn(x: np.ndarray, out: np.ndarray) -> None:
            block.engine(x, out=out)
            np.multiply(out, 2, out=out)
        return ffn

    def finals(variants: int, changed: set[int], shared: int) -> list[np.ndarray]:
        got: list[list[np.ndarray]] = [[] for _ in range(variants)]

        def final(bounds, first, states) -> None:
            for v, s in enumerate(states):
                got[v].append(s)

        walk_variants(model, ids, variants, ffn=lambda i, v, block: doubled(block)
                      if v in changed and i >= alike else None, final=final, alike=shared,
                      batch_tokens=8)
        return [np.concatenate(g) for g in got]

    dense, double = finals(1, set(), 0)[0], finals(1, {0}, 0)[0]
    assert not np.array_equal(dense, double)  # the doubled FFN changes the states
    together = finals(3, {1}, alike)
    assert np.array_equal(together[0], dense) and np.array_equal(together[2], dense)
    assert np.array_equal(together[1], double)


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_a_sequence_of_exactly_max_positions_tokens(case):
    """64 positions: 64 tokens are taken, 65 refused. Causal attention: the first 13 rows of
    the 64 are those of the reference's 13-token sequence alone (rows 7..19 of it)."""
    model = load(case)
    assert model.max_positions == 64
    short = read_ids(case)[1]
    assert short.size == 13
    longest = np.concatenate([short, np.random.default_rng(5).integers(0, 128, 51)])
    expected = np.load(FORWARD / case / "expected.npz")
    got, final = hidden_states(model, [longest], [1])
    assert_close(got[1][:13], expected["layer1"][7:20], f"{case} layer 1 of 64 tokens")
    assert_close(final[:13], expected["final"][7:20], f"{case} final of 64 tokens")
    with pytest.raises(InputError) as exc:
        walk(model, [short, np.append(longest, 3)], [0], lambda *a: None)
    assert one_line(exc) == "sequence 2: 65 tokens, more than the model's 64 positions"


def test_roberta_positions_after_the_padding_index_bound_the_length():
    """pad_token_id 1, 64 position rows: positions 2..63, so 62 tokens at most (transformers
    indexes row pad + n); 62 are taken, 63 refused."""
    model = load("roberta")
    assert (model.pad, model.positions.shape[0], model.max_positions) == (1, 64, 62)
    ids = np.random.default_rng(6).integers(2, 128, 63)
    got, final = hidden_states(model, [ids[:62]], [1])
    assert got[1].shape == (62, 64) and np.isfinite(final).all()
    with pytest.raises(InputError) as exc:
        walk(model, [ids], [0], lambda *a: None)
    assert one_line(exc) == "sequence 1: 63 tokens, more than the model's 62 positions"


def test_roberta_with_padding_index_0_starts_positions_at_1(tmp_path):
    """create_position_ids_from_input_ids with padding_idx 0: cumsum(id != 0) * (id != 0)."""
    folder = checkpoint(tmp_path, "roberta", config={"pad_token_id": 0})
    model = open_folder(folder)
    seqs = [np.array([5, 0, 7, 8]), np.array([9, 3])]
    ids = np.concatenate(seqs)
    positions = np.concatenate([np.arange(s.size) for s in seqs])
    want = np.concatenate([np.cumsum(s != 0) * (s != 0) for s in seqs])
    assert want.tolist() == [1, 0, 2, 3, 1, 2]
    assert np.array_equal(model._rows_of_positions(ids, positions), want)
    assert model.max_positions == 63


def tiny_llama(folder: Path, layers: int = 4, d: int = 32, vocab: int = 96,
               change: dict | None = None) -> Path:
    """A random 4-layer LLaMA checkpoint and its config.json; ``change`` maps tensor names
    to a replacement (None: left out)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    heads, kv, f = 4, 2, 64
    hd = d // heads
    shapes = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.q_proj.weight": (heads * hd, d),
                   p + "self_attn.k_proj.weight": (kv * hd, d),
                   p + "self_attn.v_proj.weight": (kv * hd, d),
                   p + "self_attn.o_proj.weight": (d, heads * hd),
                   p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                   p + "mlp.down_proj.weight": (d, f)}
    tensors = {name: rng.normal(0, 0.3, shape).astype(np.float32) + (len(shape) == 1)
               for name, shape in shapes.items()}
    for name, value in (change or {}).items():
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    folder.mkdir(exist_ok=True)
    save_file(tensors, folder / "model.safetensors")
    config = {"model_type": "llama", "hidden_size": d, "intermediate_size": f,
              "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": 128,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def open_folder(folder: Path) -> transformer.Transformer:
    spec = resolve_spec(None, None, weights=folder, weights_describe=True)
    return open_transformer(spec, folder, np.dtype(np.float32))


def test_walk_stops_at_the_last_layer_asked_for(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m"))
    seqs = [np.arange(5), np.arange(10, 30), np.array([3])]
    built: list[int] = []
    layer = model.layer
    model.layer = lambda i: built.append(i) or layer(i)  # type: ignore[method-assign]
    visits: list[tuple[int, np.ndarray]] = []
    walk(model, seqs, {1}, lambda i, block, x: visits.append((i, x.copy())), batch_tokens=8)
    assert built == [0, 1]  # layers 2 and 3 are never read nor computed
    assert [i for i, _ in visits] == [1, 1, 1]  # one visit per batch: 5, 20, 1 tokens
    assert [x.shape[0] for _, x in visits] == [5, 20, 1]
    model.layer = layer  # type: ignore[method-assign]
    want, _ = hidden_states(model, seqs, [1])
    np.testing.assert_allclose(np.concatenate([x for _, x in visits]), want[1], rtol=1e-5,
                               atol=1e-5)  # float32: batches of other sizes round otherwise


def test_progress_counts_tokens_through_layers(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m"))
    seen: list[int] = []
    walk(model, [np.arange(6), np.arange(4)], [2], lambda *a: None, batch_tokens=6,
         progress=seen.append)
    assert seen == [6, 10, 16, 20, 26, 30]  # two batches through layers 0, 1 and 2


@pytest.mark.slow
def test_walk_keeps_one_batch_in_memory(tmp_path):
    """The states of all tokens never live in memory at once: with batches of 200 tokens the
    peak of NumPy's allocations (tracemalloc sees them) stays under half of one copy of all
    20,000 tokens' states (it is a few batch-sized buffers, ~0.9 MB), while one batch of
    everything goes over it (so the measure can fail)."""
    model = open_folder(tiny_llama(tmp_path / "m", d=64))
    seqs = [np.random.default_rng(i).integers(0, model.vocab, 50) for i in range(400)]
    all_states = 400 * 50 * model.d_model * 4  # 5.1 MB

    def peak(batch_tokens: int) -> int:
        tracemalloc.start()
        try:
            walk(model, seqs, [3], lambda i, block, x: None, batch_tokens=batch_tokens)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    walk(model, seqs[:2], [3], lambda i, block, x: None)  # imports done before measuring
    assert peak(200) < all_states / 2
    assert peak(10**9) > all_states


@pytest.mark.slow
def test_no_room_for_any_file_is_one_line(tmp_path):
    """A file-size limit of 0 (ulimit -f 0): no folder can take the forward's spill file, so
    the temporary folder cannot even be found; one line, exit 2, no --out folder left."""
    import subprocess
    import sys

    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))"
    for command in (["capture", "--out", str(tmp_path / "o")], ["relu-stats"]):
        done = subprocess.run(
            [sys.executable, "-c", f"{limit}; from ffncli.cli import main; main()", *command,
             "--weights", str(FORWARD / "gpt2"), "--ids", str(FORWARD / "gpt2" / "ids.txt")],
            capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: cannot keep the forward's spill file in ")
        assert done.stderr.endswith(" (set TMPDIR to a folder with room)\n")
        assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Bad input: one error line.


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_an_architecture_without_a_forward(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "t5", "d_model": 32, "d_ff": 64,
                                  "num_layers": 2, "num_heads": 4, "d_kv": 8,
                                  "vocab_size": 50}))
    (tmp_path / "model.safetensors").write_bytes(
        (FORWARD / "bert" / "model.safetensors").read_bytes())
    spec = resolve_spec(None, config)
    with pytest.raises(SpecError) as exc:
        open_transformer(spec, tmp_path / "model.safetensors", np.dtype(np.float32))
    assert one_line(exc) == (
        f"{config}: model_type 't5' has no whole-model forward; these do: gpt2, bert, roberta, "
        "distilbert, llama, mistral, mixtral, qwen2, gemma, qwen3, qwen3_moe, qwen2_moe, "
        "xlm-roberta, electra, deepseek_v3, glm4_moe, llama4_text, olmoe, deepseek_v2, gpt_oss "
        "(GGUF: llama, qwen3moe, olmoe)")


def test_a_missing_attention_tensor(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m", change={
        "model.layers.1.self_attn.k_proj.weight": None}))
    with pytest.raises(WeightsError) as exc:
        walk(model, [np.arange(4)], [2], lambda *a: None)
    assert one_line(exc) == (f"{tmp_path / 'm' / 'model.safetensors'}: missing tensor "
                             "'layers.1.self_attn.k_proj.weight'")


def test_quantised_attention_is_named(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m", change={
        "model.layers.0.self_attn.v_proj.weight": None,
        "model.layers.0.self_attn.v_proj.qweight": np.zeros((4, 16), np.int32)}))
    with pytest.raises(WeightsError) as exc:
        model.layer(0)
    assert one_line(exc) == (f"{tmp_path / 'm' / 'model.safetensors'}: tensor "
                             "'layers.0.self_attn.v_proj.weight' is quantised (GPTQ or AWQ "
                             "qweight); the whole-model forward reads float checkpoints and "
                             "GGUF files")


def test_a_shape_that_lies(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m", change={
        "model.layers.0.self_attn.q_proj.weight": np.zeros((32, 16), np.float32)}))
    with pytest.raises(WeightsError) as exc:
        model.layer(0)
    assert one_line(exc) == (f"{tmp_path / 'm' / 'model.safetensors'}: tensor "
                             "'model.layers.0.self_attn.q_proj.weight': expected shape (32, 32), "
                             "got (32, 16)")


def test_a_norm_of_the_wrong_width(tmp_path):
    with pytest.raises(WeightsError) as exc:
        open_folder(tiny_llama(tmp_path / "m", change={
            "model.norm.weight": np.ones(31, np.float32)}))
    assert one_line(exc).endswith("tensor 'model.norm.weight': expected shape (32,), got (31,)")


def test_ids_outside_the_vocabulary_and_too_long_sequences(tmp_path):
    model = open_folder(tiny_llama(tmp_path / "m"))
    cases = {
        ((1, 2), (1, 96, 2)): "sequence 2: token id 96 is outside the vocabulary of 96 (ids 0 "
                              "to 95)",
        ((-1, 2),): "sequence 1: token id -1 is outside the vocabulary of 96 (ids 0 to 95)",
        ((0,) * 129,): "sequence 1: 129 tokens, more than the model's 128 positions",
        ((1,), ()): "sequence 2: expected a non-empty 1-D array of token ids, got shape (0,) "
                    "of int64",
    }
    for seqs, message in cases.items():
        with pytest.raises(InputError) as exc:
            walk(model, [np.array(s, dtype=np.int64) for s in seqs], [0], lambda *a: None)
        assert one_line(exc) == message
    with pytest.raises(InputError) as exc:  # the embeddings check too, for direct callers
        model.embed(np.array([3, 97]), np.arange(2))
    assert one_line(exc) == "token id 97 is outside the vocabulary of 96 (ids 0 to 95)"
    with pytest.raises(InputError) as exc:
        walk(model, [np.arange(3)], [4], lambda *a: None)
    assert one_line(exc) == "layer 4: expected 0 to 3 (llama has 4 layers)"
    with pytest.raises(InputError) as exc:
        walk(model, [np.arange(3)], [1], lambda *a: None, batch_tokens=0)
    assert one_line(exc) == "batch_tokens: expected a whole number >= 1, got 0"


def test_a_rope_scaling_the_forward_does_not_compute(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "dynamic", "factor": 4.0}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as exc:
        open_folder(folder)
    assert one_line(exc) == (f"{folder / 'config.json'}: key 'rope_scaling': rope type "
                             "'dynamic' is not computed; the forward knows default, linear, "
                             "llama3 and yarn")


def test_weights_without_a_config(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    spec = resolve_spec(None, folder / "config.json")
    (folder / "config.json").unlink()
    with pytest.raises(ConfigError) as exc:
        open_transformer(spec, folder, np.dtype(np.float32))
    assert one_line(exc) == (f"{folder}: the forward reads the model's config.json (norms, "
                             "positions, rotary settings); none beside the weights: give config")


# ---------------------------------------------------------------------------------------------
# Hostile input: the tiny checkpoints edited one config key or tensor at a time, each a case the
# review of issue 13 found failing (a traceback, a silent NaN result); one error line, exit 2,
# nothing written.


def test_an_empty_embedding_table(cli, tmp_path):
    """0 rows: the vocabulary was 0 and read_ids raised a ValueError (a traceback)."""
    folder = checkpoint(tmp_path, "llama",
                        tensors={"model.embed_tokens.weight": np.zeros((0, 64), np.float32)})
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {folder}/model.safetensors: tensor "
                                  "'model.embed_tokens.weight': expected shape (rows >= 1, 64), "
                                  "got (0, 64)\n")
    assert not (tmp_path / "out").exists()


def test_an_empty_position_table(cli, tmp_path):
    empty = np.zeros((0, 64), np.float32)
    folder = checkpoint(tmp_path, "gpt2", tensors={"transformer.wpe.weight": empty})
    r = cli("relu-stats", "--weights", folder, "--ids", IDS)
    assert (r.code, r.err) == (2, f"error: {folder}/model.safetensors: tensor 'wpe.weight': "
                                  "expected shape (positions >= 1, 64), got (0, 64)\n")


def test_a_roberta_padding_index_past_the_positions(cli, tmp_path):
    """RoBERTa's positions start after pad_token_id: none left was max_positions 0, a
    ValueError traceback."""
    folder = checkpoint(tmp_path, "roberta", config={"pad_token_id": 500})
    r = capture(cli, folder, IDS, tmp_path / "out")
    rows = json.loads((FORWARD / "roberta" / "config.json").read_text())[
        "max_position_embeddings"]
    assert (r.code, r.err) == (2, f"error: {folder}/config.json: key 'pad_token_id': positions "
                                  f"start after it, so expected below {rows - 1} (the position "
                                  f"table has {rows} rows), got 500\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("window", [0, -3])
def test_a_sliding_window_of_no_key(cli, tmp_path, window):
    """A window of 0 masked every key: softmax of -inf only, NaN captured with exit 0."""
    folder = checkpoint(tmp_path, "mistral", config={"sliding_window": window})
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {folder}/config.json: key 'sliding_window': expected "
                                  f"a whole number >= 1, got {window}\n")
    assert not (tmp_path / "out").exists()


def test_a_sliding_window_of_one_key_is_each_token_alone(cli, tmp_path):
    """The smallest window: each token attends to itself only (its value, whatever its
    rotary position), so the last token of a sequence gives the state it gives alone; with
    Mistral's own window of 6 it does not."""
    ids, alone = tmp_path / "ids.txt", tmp_path / "alone.txt"
    ids.write_text("5 9 17\n")
    alone.write_text("17\n")
    states = {}
    for window in (1, 6):
        folder = checkpoint(tmp_path / str(window), "mistral", config={"sliding_window": window})
        for f in (ids, alone):
            out = tmp_path / f"{window}-{f.stem}"
            assert capture(cli, folder, f, out).code == 0
            states[window, f.stem] = np.load(out / "layer1.npy")
    np.testing.assert_allclose(states[1, "ids"][2], states[1, "alone"][0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(states[6, "ids"][2], states[6, "alone"][0], rtol=1e-3, atol=1e-4)


def test_nan_weights_are_refused_not_counted(cli, tmp_path):
    """NaN is never <= 0: every unit counted active, NaN in --json (not strict JSON), NaN
    captured, all with exit 0. Now the first layer whose FFN input is not finite is named."""
    folder = nan_at("llama", "model.layers.0.self_attn.q_proj.weight", tmp_path)
    message = (f"error: {folder}: layer 0's FFN input of sequence 1 holds NaN or infinity: the "
               "checkpoint's weights hold some, or its forward overflows\n")
    r = cli("relu-stats", "--weights", folder, "--ids", IDS, "--json")
    assert (r.code, r.out, r.err) == (2, "", message)
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, message)
    assert not (tmp_path / "out").exists()


def test_infinite_ffn_weights_are_refused_when_the_layer_is_built(cli, tmp_path):
    """Layer 0's FFN gave infinity: its input was finite (exit 0 on --layer 0, every unit
    counted from NaN activations), layer 1's was not. Now the tensor is named, either way."""
    folder = nan_at("gpt2", "transformer.h.0.mlp.c_fc.weight", tmp_path, np.inf)
    line = (f"error: {folder}/model.safetensors: tensor 'transformer.h.0.mlp.c_fc.weight' holds "
            "1 NaN or infinite value, the first at index (0, 0)\n")
    for layers in (("--layer", "0"), ()):
        r = cli("relu-stats", "--weights", folder, "--ids", IDS, *layers, "--json")
        assert (r.code, r.out, r.err) == (2, "", line)


def test_nan_in_a_later_sequence_is_named(tmp_path):
    """The sequence named is the first holding NaN, counted over the batches."""
    from ffncli.compute.forward.walk import walk
    from ffncli.errors import WeightsError
    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import open_forward
    from ffncli.specs.spec import Overrides

    model = open_forward(ModelChoice(weights=FORWARD / "gpt2"), Overrides())
    embed = model.embed

    def poisoned(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        h = embed(ids, positions)
        h[ids == 99] = np.nan  # token 99 appears in sequence 4 only
        return h

    model.embed = poisoned  # type: ignore[method-assign]
    seqs = [np.array(s) for s in ([1, 2], [3, 4, 5], [6], [7, 99, 8])]
    with pytest.raises(WeightsError) as info:
        walk(model, seqs, [1], lambda *a: None, batch_tokens=3)
    assert str(info.value) == (f"{FORWARD / 'gpt2'}: layer 1's FFN input of sequence 4 holds "
                               "NaN or infinity: the checkpoint's weights hold some, or its "
                               "forward overflows")


def _odd_heads(tmp_path: Path, base: str, head_dim: int) -> Path:
    """``base`` with heads ``head_dim`` wide: its config says so and every attention weight
    has that shape (random values), as a checkpoint with odd heads would."""
    from safetensors.numpy import load_file

    settings = json.loads((FORWARD / base / "config.json").read_text())
    d, nq = settings["hidden_size"], settings["num_attention_heads"]
    nkv = settings.get("num_key_value_heads", nq)
    rng = np.random.default_rng(0)
    shapes = {"q_proj": (nq * head_dim, d), "k_proj": (nkv * head_dim, d),
              "v_proj": (nkv * head_dim, d), "o_proj": (d, nq * head_dim),
              "q_norm": (head_dim,), "k_norm": (head_dim,)}
    tensors = {}
    for name, w in load_file(str(FORWARD / base / "model.safetensors")).items():
        part = name.split(".")[-2]
        if ".self_attn." in name and part in shapes:
            shape = shapes[part] if name.endswith(".weight") else (shapes[part][0],)
            tensors[name] = rng.normal(0, 0.1, shape).astype(w.dtype)
    return checkpoint(tmp_path, base, config={"head_dim": head_dim}, tensors=tensors)


def _odd_gguf(tmp_path: Path) -> Path:
    pytest.importorskip("gguf")
    from helpers.gguf_files import write_gguf

    path = tmp_path / "odd.gguf"
    write_gguf(path, head_dim=15)
    return path


ODD_HEADS = [  # (id, make(tmp_path) -> weights, the config or metadata named, head width)
    ("llama-15", lambda t: _odd_heads(t, "llama", 15), "{w}/config.json", 15),
    ("qwen3-9", lambda t: _odd_heads(t, "qwen3", 9), "{w}/config.json", 9),
    ("mistral-1", lambda t: _odd_heads(t, "mistral", 1), "{w}/config.json", 1),
    ("gguf-15", _odd_gguf, "{w} (GGUF metadata)", 15),
]


@pytest.mark.parametrize("make,source,width", [c[1:] for c in ODD_HEADS],
                         ids=[c[0] for c in ODD_HEADS])
def test_odd_heads_with_rotary_positions_are_one_line(cli, tmp_path, make, source, width):
    """The rotary step split a head into halves of different widths: a ValueError traceback.
    transformers' rotate_half cannot compute them either, so they are refused."""
    weights = make(tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n4 5\n")  # in every vocabulary (the GGUF file's has 40)
    line = (f"error: {source.format(w=weights)}: heads of {width} values: rotary positions turn "
            "pairs of a head's values, so its width must be even (transformers does not "
            "compute an odd one either)\n")
    r = cli("relu-stats", "--weights", weights, "--ids", ids)
    assert (r.code, r.out, r.err) == (2, "", line)
    r = capture(cli, weights, ids, tmp_path / "out")
    assert (r.code, r.err) == (2, line)
    assert not (tmp_path / "out").exists()


def _gguf_claiming(tmp_path: Path, layers: int) -> Path:
    """A two-layer GGUF file whose llama.block_count says ``layers``."""
    pytest.importorskip("gguf")
    from helpers.gguf_files import write_gguf

    path = tmp_path / "claims.gguf"
    write_gguf(path)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"llama.block_count") + len(b"llama.block_count") + 4  # past its u32 type
    raw[at:at + 4] = layers.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


LAYER_CLAIMS = [  # (id, make(tmp_path) -> weights, the config named, layers claimed, held)
    ("llama-2**16", lambda t: checkpoint(t, "llama", config={"num_hidden_layers": 2**16}),
     "{w}/config.json", 2**16, "{w}/model.safetensors", "layers 0-1"),
    ("gpt2-2**16", lambda t: checkpoint(t, "gpt2", config={"n_layer": 2**16}),
     "{w}/config.json", 2**16, "{w}/model.safetensors", "layers 0-1"),
    ("bert-3", lambda t: checkpoint(t, "bert", config={"num_hidden_layers": 3}),
     "{w}/config.json", 3, "{w}/model.safetensors", "layers 0-1"),
    ("gguf-2**16", lambda t: _gguf_claiming(t, 2**16), "{w} (GGUF metadata)", 2**16,
     "{w}", "layers 0-1"),
]
# Past the most a spec lays out (65,536 layers), the count itself is the error, named as the
# file spells it.
PAST_THE_CAP = [
    ("llama-2**31", lambda t: checkpoint(t, "llama", config={"num_hidden_layers": 2**31}),
     "{w}/config.json: key 'num_hidden_layers'", 2**31),
    ("gpt2-2**40", lambda t: checkpoint(t, "gpt2", config={"n_layer": 2**40}),
     "{w}/config.json: key 'n_layer'", 2**40),
    ("gguf-2**32-1", lambda t: _gguf_claiming(t, 2**32 - 1),
     "{w}: metadata key 'llama.block_count'", 2**32 - 1),
]


@pytest.mark.parametrize("make,where,claimed", [c[1:] for c in PAST_THE_CAP],
                         ids=[c[0] for c in PAST_THE_CAP])
def test_a_layer_count_past_the_cap_is_one_line(cli, tmp_path, make, where, claimed):
    weights = make(tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n4 5\n")
    r = cli("relu-stats", "--weights", weights, "--ids", ids)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: {where.format(w=weights)}: expected at most 65,536 layers, got "
        f"{claimed}\n")


@pytest.mark.parametrize("make,config,claimed,path,held", [c[1:] for c in LAYER_CLAIMS],
                         ids=[c[0] for c in LAYER_CLAIMS])
def test_a_layer_count_past_the_weights_is_one_line_before_anything_scales(
        cli, tmp_path, make, config, claimed, path, held):
    """2**31 layers made --layer all build a list of every one (MemoryError, or the
    out-of-memory killer); fewer, a walk ran to the first missing layer. Past 65,536 the count
    is refused as it is read (above); up to it, it is checked against the tensors when the
    forward opens."""
    weights = make(tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n4 5\n")
    line = (f"error: {config.format(w=weights)}: {claimed:,} layers, but the weights "
            f"({path.format(w=weights)}) hold {held}\n")
    for chosen in ((), ("--layer", "0")):
        r = cli("relu-stats", "--weights", weights, "--ids", ids, *chosen)
        assert (r.code, r.out, r.err) == (2, "", line)
    r = capture(cli, weights, ids, tmp_path / "out")
    assert (r.code, r.err) == (2, line)
    assert not (tmp_path / "out").exists()


def test_the_spill_keeps_each_variants_rows_and_spreads_variant_0s():
    """Each variant's rows of a sequence come back as written, the others' untouched; spread
    copies variant 0's states to every other variant; closing removes the file."""
    packing = walk_module.Packing.of([3, 2, 4], batch_tokens=5)
    assert packing.batches == [(0, 2), (2, 3)] and packing.tokens == 9
    assert packing.bounds(0, 2) == [(0, 3), (3, 5)] and packing.widest == 5
    rng = np.random.default_rng(7)
    states = rng.standard_normal((3, 9, 4)).astype(np.float32)
    with walk_module.Spill(packing, 3, 4, np.dtype(np.float32)) as spill:
        for v in range(3):
            for a, b in packing.batches:
                spill.write(v, a, states[v, packing.starts[a]:packing.starts[b]])
        back = np.empty((2, 4), np.float32)
        assert np.array_equal(spill.read(2, 1, back), states[2, 3:5])
        spill.spread(np.empty((packing.widest, 4), np.float32))
        for v in range(3):
            for a, b in packing.batches:
                got = spill.read(v, a, np.empty((packing.rows(a, b), 4), np.float32))
                assert np.array_equal(got, states[0, packing.starts[a]:packing.starts[b]])
        fd = spill._fd()
    with pytest.raises(OSError):
        os.fstat(fd)
