"""Quantised checkpoints built tensor by tensor, as GPTQ, AWQ and bitsandbytes save them: a
two-layer llama whose linear layers are packed, with its config.json. Used by
tests/test_quantised.py and by docs/weights.md
(``python tests/helpers/quantised_files.py FOLDER SCHEME``). The packed values are zeros: these
files are for counting, not for running."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

D, F, HEADS, LAYERS, VOCAB, GROUP = 64, 128, 4, 2, 50, 32
LINEARS = {"self_attn.q_proj": (D, D), "self_attn.k_proj": (D, D), "self_attn.v_proj": (D, D),
           "self_attn.o_proj": (D, D), "mlp.gate_proj": (D, F), "mlp.up_proj": (D, F),
           "mlp.down_proj": (F, D)}  # (in, out)
CONFIG = {"model_type": "llama", "hidden_size": D, "intermediate_size": F,
          "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "vocab_size": VOCAB,
          "tie_word_embeddings": False}
TOTAL = (2 * VOCAB * D + LAYERS * (4 * D * D + 3 * D * F + 2 * D) + D)


def gptq_layer(n_in: int, n_out: int, bits: int = 4) -> dict[str, np.ndarray]:
    groups = n_in // GROUP
    return {"qweight": np.zeros((n_in * bits // 32, n_out), np.int32),
            "qzeros": np.zeros((groups, n_out * bits // 32), np.int32),
            "scales": np.ones((groups, n_out), np.float16),
            "g_idx": np.arange(n_in, dtype=np.int32) // GROUP}


def awq_layer(n_in: int, n_out: int, bits: int = 4) -> dict[str, np.ndarray]:
    groups = n_in // GROUP
    return {"qweight": np.zeros((n_in, n_out * bits // 32), np.int32),
            "qzeros": np.zeros((groups, n_out * bits // 32), np.int32),
            "scales": np.ones((groups, n_out), np.float16)}


def bnb_int8_layer(n_in: int, n_out: int) -> dict[str, np.ndarray]:
    return {"weight": np.zeros((n_out, n_in), np.int8), "SCB": np.ones(n_out, np.float32),
            "weight_format": np.zeros((), np.uint8)}


def bnb_nf4_layer(n_in: int, n_out: int) -> dict[str, np.ndarray]:
    n = n_in * n_out
    return {"weight": np.zeros((n // 2, 1), np.uint8),
            "weight.absmax": np.ones(n // 64, np.uint8),
            "weight.quant_map": np.linspace(-1, 1, 16, dtype=np.float32),
            "weight.nested_absmax": np.ones(n // 64 // 256 + 1, np.float32),
            "weight.nested_quant_map": np.linspace(-1, 1, 256, dtype=np.float32),
            "weight.quant_state.bitsandbytes__nf4": np.frombuffer(b'{"shape": []}', np.uint8)}


SCHEMES = {"GPTQ 4-bit": gptq_layer, "AWQ 4-bit": awq_layer, "bitsandbytes int8": bnb_int8_layer,
           "bitsandbytes nf4": bnb_nf4_layer}


def write_model(folder: Path, scheme: str, **replace: np.ndarray):
    """A two-layer llama checkpoint whose linear layers are stored by ``scheme``, embeddings,
    head and norms in F16, with config.json beside it."""
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": np.zeros((VOCAB, D), np.float16),
        "lm_head.weight": np.zeros((VOCAB, D), np.float16),
        "model.norm.weight": np.ones(D, np.float16),
    }
    for i in range(LAYERS):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{norm}.weight"] = np.ones(D, np.float16)
        for name, (n_in, n_out) in LINEARS.items():
            for part, array in SCHEMES[scheme](n_in, n_out).items():
                tensors[f"model.layers.{i}.{name}.{part}"] = array
    tensors.update(replace)
    from safetensors.numpy import save_file

    path = folder / "model.safetensors"
    save_file(tensors, str(path))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return path, tensors



AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def pack_gptq(q: np.ndarray, zeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray,
              bits: int = 4) -> dict[str, np.ndarray]:
    """As AutoGPTQ's QuantLinear.pack (the "gptq" v1 format of the Hugging Face hub): q
    [in, out] of bits each, zeros [groups, out] from 1 to 2**bits; row i * per + j of q in
    bits j * bits of qweight row i; zeros stored minus one, packed along the output the same
    way. Written as loops, apart from ffncli's vectorised unpacking."""
    per = 32 // bits
    qweight = np.zeros((q.shape[0] // per, q.shape[1]), np.uint32)
    for j in range(per):
        qweight |= q[j::per].astype(np.uint32) << np.uint32(bits * j)
    stored = (zeros - 1) & ((1 << bits) - 1)
    qzeros = np.zeros((zeros.shape[0], zeros.shape[1] // per), np.uint32)
    for j in range(per):
        qzeros |= stored[:, j::per].astype(np.uint32) << np.uint32(bits * j)
    return {"qweight": qweight.view(np.int32), "qzeros": qzeros.view(np.int32),
            "scales": scales.astype(np.float16), "g_idx": g_idx.astype(np.int32)}


def pack_awq(q: np.ndarray, zeros: np.ndarray, scales: np.ndarray) -> dict[str, np.ndarray]:
    """As AutoAWQ's GEMM packing: 8 columns of 4 bits a word, column AWQ_ORDER[k] of each eight
    in bits 4k; zeros the same (not minus one)."""
    def pack(values: np.ndarray) -> np.ndarray:
        words = np.zeros((values.shape[0], values.shape[1] // 8), np.uint32)
        for col in range(words.shape[1]):
            for k in range(8):
                words[:, col] |= values[:, col * 8 + AWQ_ORDER[k]].astype(np.uint32) << (4 * k)
        return words.view(np.int32)

    return {"qweight": pack(q), "qzeros": pack(zeros), "scales": scales.astype(np.float16)}

if __name__ == "__main__":
    folder, scheme = Path(sys.argv[1]), sys.argv[2]
    folder.mkdir(exist_ok=True)
    write_model(folder, {"gptq": "GPTQ 4-bit", "awq": "AWQ 4-bit", "int8": "bitsandbytes int8",
                         "nf4": "bitsandbytes nf4"}[scheme])
