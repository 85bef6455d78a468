"""Bytes on disk to headers, arrays and token streams: safetensors (one file, shards, an index),
GGUF, GPTQ/AWQ, .npy, .npz, text and token ids, the Hugging Face cache, and one handle over an
open checkpoint (``tensors``). Headers are parsed without NumPy, so counting stays NumPy-free."""
