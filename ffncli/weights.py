"""Where FFN weights come from: seeded random draws, .npz files, real .safetensors checkpoints.

Every source returns the ``ffn`` module's weight classes in ``[in, out]`` layout and the
requested dtype, with shapes checked against the spec.

Random draws (``numpy.random.default_rng(init.seed).normal(0, init.std)``, float64, then cast)
happen in this order, biases zero: dense W1 (d_model x d_ff), W2 (d_ff x d_model); gated W,
V, W2; mixture of experts: the router (d_model x experts) first, then each expert in turn.
"""

from __future__ import annotations

import contextlib
import os
import re
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ffncli.checkpoint import Header, TensorInfo, open_checkpoint
from ffncli.counting import ffn_params
from ffncli.errors import MemoryBudgetError, WeightsError
from ffncli.ffn import DenseWeights, ExpertWeights, GatedWeights, MoEWeights, Weights
from ffncli.files import open_file
from ffncli.spec import ModelSpec
from ffncli.tokens import NpyHeader, read_npy_header

DEFAULT_BUDGET = 2 * 10**9
EXPERT_OVERHEAD = 1024  # bytes: one expert's weight objects and array headers, measured ~700


# ---------------------------------------------------------------------------------------------
# Memory budget.


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def parse_size(text: str) -> int:
    """'2GB', '512MB', '1.5G', '1000000' -> bytes (powers of 1000; KiB, MiB, GiB of 1024)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)\s*", text.lower())
    if not m:
        raise WeightsError(f"option --max-memory: expected a size such as 2GB or 512MB, "
                           f"got {text!r}")
    unit = m.group(2).rstrip("b")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[unit]
    size = int(float(m.group(1)) * scale)
    if size < 1:
        raise WeightsError(f"option --max-memory: expected a size above 0, got {text!r}")
    return size


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 10**8 else f"{n / 1e6:.2f} MB"


def check_budget(spec: ModelSpec, dtype: np.dtype, budget: int | None) -> int:
    """Refuse random weights that would not fit; returns the bytes they need (with each
    expert's own bookkeeping: a million tiny experts are mostly Python objects)."""
    experts = spec.ffn.experts if spec.ffn.is_moe else 0
    need = ffn_params(spec.d_model, spec.ffn) * np.dtype(dtype).itemsize \
        + experts * EXPERT_OVERHEAD
    free = available_memory()
    limit = memory_limit(budget)
    assert limit is not None  # a default is given
    if need > limit:
        raise MemoryBudgetError(
            f"the random weights of one FFN layer of {spec.name} need {_size(need)} in "
            f"{np.dtype(dtype).name}, over the {_size(limit)} budget; shrink it "
            "(--d-model, --d-ff, --experts) or raise --max-memory"
            + ("" if free is None or need <= free else
               f" (only {_size(free)} of memory is free)")
        )
    return need


def memory_limit(budget: int | None, default: int | None = DEFAULT_BUDGET) -> int | None:
    """The budget in force: ``--max-memory`` (else ``default``), never more than is free."""
    limit = default if budget is None else budget
    free = available_memory()
    if free is not None:
        limit = free if limit is None else min(limit, free)
    return limit


def check_working_set(what: str, need: int, how: str) -> None:
    """Refuse work whose buffers would not fit in the memory that is free: one line saying
    what to change, instead of a MemoryError (or the system's out-of-memory killer) later."""
    free = available_memory()
    if free is not None and need > free:
        raise MemoryBudgetError(f"{what} needs {_size(need)} of memory, over the "
                                f"{_size(free)} that is free; {how}")


def engine_bytes(d_model: int, d_ff: int, experts: int, dtype: np.dtype,
                 chunk_tokens: int) -> int:
    """The engine's buffers for one chunk (hidden, gate, input, two outputs) and the
    per-unit counters of relu-stats (three int64 per unit of every expert)."""
    item = np.dtype(dtype).itemsize
    return chunk_tokens * (2 * d_ff + 4 * d_model) * item + 24 * d_ff * experts


# ---------------------------------------------------------------------------------------------
# Random.


def _draw_expert(rng: np.random.Generator, spec: ModelSpec, dtype: np.dtype) -> ExpertWeights:
    d, f, std = spec.d_model, spec.ffn.d_ff, spec.init.std

    def normal(shape: tuple[int, int]) -> np.ndarray:
        return rng.normal(0, std, shape).astype(dtype, copy=False)

    def zeros(n: int) -> np.ndarray | None:
        return np.zeros(n, dtype=dtype) if spec.ffn.bias else None

    if spec.ffn.gated:
        w, v, w2 = normal((d, f)), normal((d, f)), normal((f, d))
        return GatedWeights(w, zeros(f), v, zeros(f), w2, zeros(d))
    w1, w2 = normal((d, f)), normal((f, d))
    return DenseWeights(w1, zeros(f), w2, zeros(d))


def random_weights(spec: ModelSpec, dtype: np.dtype, budget: int | None = None) -> Weights:
    check_budget(spec, dtype, budget)
    rng = np.random.default_rng(spec.init.seed)
    ffn = spec.ffn
    if not ffn.is_moe:
        return _draw_expert(rng, spec, dtype)
    router = rng.normal(0, spec.init.std, (spec.d_model, ffn.experts)).astype(dtype)
    experts = tuple(_draw_expert(rng, spec, dtype) for _ in range(ffn.experts))
    router_bias = np.zeros(ffn.experts, dtype=dtype) if ffn.router_bias else None
    return MoEWeights(router, router_bias, experts, ffn.top_k, ffn.capacity_factor)


# ---------------------------------------------------------------------------------------------
# Shape checks shared by the file readers.


def checked(source: str, name: str, array: np.ndarray, shape: tuple[int, ...],
             dtype: np.dtype) -> np.ndarray:
    if array.shape != shape:
        raise WeightsError(f"{source}: '{name}': expected shape {shape}, got {array.shape}")
    if array.dtype.kind != "f":
        raise WeightsError(f"{source}: '{name}': expected floating-point values, got "
                           f"{array.dtype}")
    return np.ascontiguousarray(array, dtype=dtype)


# Each matrix's bias, in ffncli's names: w1 b1 w2 b2 (dense), w b v c w2 b2 (gated).
BIAS_OF = {"w1": "b1", "w2": "b2", "w": "b", "v": "c"}


def assemble(source: str, spec: ModelSpec, dtype: np.dtype,
              get: Callable[[str], np.ndarray | None], prefix: str = "") -> ExpertWeights:
    """Build one expert from named [in, out] arrays: w1 b1 w2 b2, or w b v c w2 b2."""
    d, f = spec.d_model, spec.ffn.d_ff

    def need(name: str, shape: tuple[int, ...]) -> np.ndarray:
        array = get(prefix + name)
        if array is None:
            raise WeightsError(f"{source}: missing array '{prefix + name}'")
        return checked(source, prefix + name, array, shape, dtype)

    def maybe(name: str, n: int) -> np.ndarray | None:
        array = get(prefix + name)
        return None if array is None else checked(source, prefix + name, array, (n,), dtype)

    if spec.ffn.gated:
        return GatedWeights(need("w", (d, f)), maybe("b", f), need("v", (d, f)), maybe("c", f),
                            need("w2", (f, d)), maybe("b2", d))
    return DenseWeights(need("w1", (d, f)), maybe("b1", f), need("w2", (f, d)), maybe("b2", d))


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
               OSError, NotImplementedError, RuntimeError)  # what zipfile raises on bad data


@contextlib.contextmanager
def _zip_errors(label: str) -> Iterator[None]:
    """zipfile's errors on a damaged archive (a bad CRC, a cut deflate stream, an unknown
    compression, a bad UTF-8 name) as one WeightsError line."""
    try:
        yield
    except _ZIP_ERRORS as exc:
        why = str(exc) or type(exc).__name__
        raise WeightsError(f"{label}: cannot unzip it ({why})") from None


class _NpzMember:
    """One .npy array of an .npz archive: its header is checked on opening, its data is read
    only when it is converted (``np.asarray``). ``checked`` compares the header's shape and
    dtype with the spec first, so a member claiming a huge array (a zip bomb) is refused
    before anything is allocated or decompressed."""

    def __init__(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> None:
        self.archive, self.info, self.label = archive, info, label
        with _zip_errors(label), archive.open(info) as stream:
            header = read_npy_header(stream, info.file_size, label, WeightsError, "member")
        if header.dtype.hasobject:
            raise WeightsError(f"{label} holds Python objects; refusing to unpickle it")
        header.check_size(info.file_size, label, WeightsError, "member")
        self.header: NpyHeader = header
        self.shape, self.dtype = header.shape, header.dtype

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        h = self.header
        raw = np.empty(h.nbytes, dtype=np.uint8)
        view, done = raw.data, 0
        with _zip_errors(self.label), self.archive.open(self.info) as stream:
            assert isinstance(stream, zipfile.ZipExtFile)  # what ZipFile.open reads through
            stream.read(h.offset)  # the header, checked in __init__
            while done < h.nbytes:
                got = stream.readinto(view[done:done + 2**20])
                if not got:
                    break
                done += got  # on reading the last byte zipfile checks the CRC
        if done != h.nbytes:
            raise WeightsError(f"{self.label}: the member is truncated ({h.offset + done:,} "
                               f"bytes, the header promises {h.offset + h.nbytes:,})")
        array = raw.view(h.dtype).reshape(h.shape, order="F" if h.fortran else "C")
        return array if dtype is None else array.astype(dtype)


def _open_zip(path: Path, f: BinaryIO) -> zipfile.ZipFile:
    if f.read(4) not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip's first member, or its end
        raise WeightsError(f"{path}: not an .npz archive (a zip file of .npy arrays)")
    f.seek(0)
    try:
        return zipfile.ZipFile(f)
    except _ZIP_ERRORS as exc:
        raise WeightsError(f"{path}: the .npz archive is cut short or damaged ({exc})") \
            from None


def _npz_members(path: Path, archive: zipfile.ZipFile) -> dict[str, _NpzMember]:
    """The archive's arrays by name (``w1`` for member ``w1.npy``), every member checked:
    named ``<name>.npy``, once, not encrypted, a .npy header whose promise matches the
    member's size."""
    infos = archive.infolist()
    if not infos:
        raise WeightsError(f"{path}: the .npz archive holds no arrays")
    name, times = Counter(info.filename for info in infos).most_common(1)[0]
    if times > 1:
        raise WeightsError(f"{path}: member '{name}' appears {times} times in the archive")
    members: dict[str, _NpzMember] = {}
    for info in infos:
        label = f"{path}: member '{info.filename}'"
        if not info.filename.endswith(".npy"):
            raise WeightsError(f"{label}: expected only <name>.npy arrays in an .npz archive")
        if info.flag_bits & 0x1:
            raise WeightsError(f"{label} is encrypted")
        members[info.filename[:-4]] = _NpzMember(archive, info, label)
    return members


def npz_weights(path: Path, spec: ModelSpec, dtype: np.dtype) -> Weights:
    """Arrays ``w1 b1 w2 b2`` (dense), ``w b v c w2 b2`` (gated, W activated), all [in, out];
    biases optional. Mixture of experts: ``router`` (d_model x E), optional ``router_bias``,
    and each expert's arrays prefixed ``experts.<e>.``. Every member's header is checked
    when the archive is opened; only the arrays the spec uses are read."""
    with open_file(path, "weights file", WeightsError) as f, _open_zip(path, f) as archive:
        members = _npz_members(path, archive)
        asked: set[str] = set()

        def get(name: str) -> np.ndarray | None:
            asked.add(name)
            return members.get(name)  # type: ignore[return-value]  # read by np.asarray

        weights = _npz_assemble(path, spec, dtype, get)
        unused = sorted(set(members) - asked)
        if unused:  # a misspelt bias would otherwise be left out without a word
            raise WeightsError(f"{path}: unexpected array{'s' if len(unused) > 1 else ''} "
                               f"{', '.join(repr(n) for n in unused)}; a {spec.ffn.label} FFN "
                               f"reads {', '.join(repr(n) for n in sorted(asked))}")
        return weights


def _npz_assemble(path: Path, spec: ModelSpec, dtype: np.dtype,
                  get: Callable[[str], np.ndarray | None]) -> Weights:
    source = str(path)
    ffn = spec.ffn
    if not ffn.is_moe:
        return assemble(source, spec, dtype, get)
    router = get("router")
    if router is None:
        raise WeightsError(f"{path}: missing array 'router'")
    router = checked(source, "router", router, (spec.d_model, ffn.experts), dtype)
    rb = get("router_bias")
    rb = None if rb is None else checked(source, "router_bias", rb, (ffn.experts,), dtype)
    experts = tuple(assemble(source, spec, dtype, get, f"experts.{e}.")
                    for e in range(ffn.experts))
    return MoEWeights(router, rb, experts, ffn.top_k, ffn.capacity_factor)


# ---------------------------------------------------------------------------------------------
# .safetensors checkpoints: one layer's FFN, read tensor by tensor.


def read_tensor(header: Header, info: TensorInfo, rows: np.ndarray | None = None) -> np.ndarray:
    """One tensor's bytes from the file (nothing else is read), as float32 or float64.

    Exactly ``end - start`` bytes are read into an array allocated for them, after checking
    that they match the shape and lie inside the file as it is now; a file cut short since its
    header was read is an error, never a shorter array. With ``rows`` (indices into the first
    axis, each in range: an embedding table's rows for a batch of token ids), only those rows
    are read, in that order."""

    path, where = header.path, f"{header.path}: tensor '{info.name}'"
    if info.dtype not in ("F32", "F16", "BF16", "F64"):
        raise WeightsError(f"{path}: tensor '{info.name}' has dtype {info.dtype}; "
                           "F32, F16, BF16 and F64 can be loaded")
    raw_dtype = np.dtype({"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}[info.dtype])
    nbytes = info.numel * raw_dtype.itemsize
    if info.start < 0 or info.end - info.start != nbytes:
        raise WeightsError(f"{where}: bytes {info.start}-{info.end} of the file do not hold "
                           f"shape {list(info.shape)} of {info.dtype} ({nbytes:,} bytes)")
    extent = raw_dtype.itemsize  # what NumPy must address: zero-length dimensions aside
    for d in info.shape:
        extent *= max(d, 1)
    if len(info.shape) > 32 or extent >= 2**63:  # NumPy >= 1.24 holds 32 dimensions, < 2**63 B
        raise WeightsError(f"{where}: shape {list(info.shape)} cannot be held by an array")
    shape = info.shape if rows is None else (len(rows), *info.shape[1:])
    row_bytes = nbytes // info.shape[0] if rows is not None and info.shape[0] else nbytes
    spans = [(info.start, nbytes)] if rows is None else \
        [(info.start + int(r) * row_bytes, row_bytes) for r in rows]
    with open_file(path, "weights file", WeightsError) as f:
        size = os.fstat(f.fileno()).st_size
        if info.end > size:
            raise WeightsError(f"{where}: its bytes {info.start:,}-{info.end:,} run past the "
                               f"end of the file ({size:,} bytes); was it cut short?")
        array = np.empty(sum(n for _, n in spans) // raw_dtype.itemsize, dtype=raw_dtype)
        buffer = array.view(np.uint8).data
        at = 0
        for start, want in spans:
            f.seek(start)
            done = 0
            while done < want:  # one read() returns at most ~2 GB on Linux
                got = f.readinto(buffer[at + done:at + want])
                if not got:
                    raise WeightsError(f"{where}: the file ends after "
                                       f"{start - info.start + done:,} of its {nbytes:,} "
                                       "bytes; was it cut short?")
                done += got
            at += want
    if info.dtype == "BF16":  # the top 16 bits of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    elif info.dtype == "F16":
        array = array.astype(np.float32)
    return array.reshape(shape)


@dataclass(frozen=True)
class Layout:
    """Where one family keeps a layer's FFN: tensor names (with {i} the layer, {e} an expert)
    and whether matrices are nn.Linear ([out, in], transposed on load) or Conv1D ([in, out])."""

    names: dict[str, str]  # our name (w1, w2 or w, v, w2) -> checkpoint name stem
    linear: bool = True
    router: str | None = None  # mixture of experts: router stem; names then hold {e}
    gate_up: str | None = None  # Phi-3: one [2 d_ff, d_model] matrix, gate rows then up rows


_BERT = Layout({"w1": "layer.{i}.intermediate.dense", "w2": "layer.{i}.output.dense"})
_LLAMA = Layout({"w": "layers.{i}.mlp.gate_proj", "v": "layers.{i}.mlp.up_proj",
                 "w2": "layers.{i}.mlp.down_proj"})
_H_TO_4H = Layout({"w1": "h.{i}.mlp.dense_h_to_4h", "w2": "h.{i}.mlp.dense_4h_to_h"})
LAYOUTS: dict[str, Layout] = {
    "bert": _BERT,
    "roberta": _BERT,
    "distilbert": Layout({"w1": "layer.{i}.ffn.lin1", "w2": "layer.{i}.ffn.lin2"}),
    "gpt2": Layout({"w1": "h.{i}.mlp.c_fc", "w2": "h.{i}.mlp.c_proj"}, linear=False),
    "opt": Layout({"w1": "layers.{i}.fc1", "w2": "layers.{i}.fc2"}),
    "gpt_neox": Layout({"w1": "layers.{i}.mlp.dense_h_to_4h",
                        "w2": "layers.{i}.mlp.dense_4h_to_h"}),
    "phi": Layout({"w1": "layers.{i}.mlp.fc1", "w2": "layers.{i}.mlp.fc2"}),
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "gemma": _LLAMA,
    "mixtral": Layout({"w": "layers.{i}.block_sparse_moe.experts.{e}.w1",
                       "v": "layers.{i}.block_sparse_moe.experts.{e}.w3",
                       "w2": "layers.{i}.block_sparse_moe.experts.{e}.w2"},
                      router="layers.{i}.block_sparse_moe.gate"),
    "qwen3": _LLAMA, "granite": _LLAMA, "olmo": _LLAMA, "olmo2": _LLAMA, "gemma2": _LLAMA,
    "gemma3_text": _LLAMA, "cohere": _LLAMA, "stablelm": _LLAMA,
    "phi3": Layout({"w2": "layers.{i}.mlp.down_proj"}, gate_up="layers.{i}.mlp.gate_up_proj"),
    "starcoder2": Layout({"w1": "layers.{i}.mlp.c_fc", "w2": "layers.{i}.mlp.c_proj"}),
    "gpt_bigcode": Layout({"w1": "h.{i}.mlp.c_fc", "w2": "h.{i}.mlp.c_proj"}),
    "gptj": Layout({"w1": "h.{i}.mlp.fc_in", "w2": "h.{i}.mlp.fc_out"}),
    "falcon": _H_TO_4H, "bloom": _H_TO_4H,
    "mpt": Layout({"w1": "blocks.{i}.ffn.up_proj", "w2": "blocks.{i}.ffn.down_proj"}),
    "electra": _BERT,  # xlm-roberta's spec has family bert
    "t5": Layout({"w1": "encoder.block.{i}.layer.1.DenseReluDense.wi",
                  "w2": "encoder.block.{i}.layer.1.DenseReluDense.wo"}),
    "t5-gated": Layout({"w": "encoder.block.{i}.layer.1.DenseReluDense.wi_0",
                        "v": "encoder.block.{i}.layer.1.DenseReluDense.wi_1",
                        "w2": "encoder.block.{i}.layer.1.DenseReluDense.wo"}),
}


def find_tensor(names: Iterable[str], stem: str) -> str | None:
    """The tensor named ``stem`` under any prefix (``transformer.``, ``model.``, ``bert.``)."""
    hits = [name for name in names if name == stem or name.endswith("." + stem)]
    return hits[0] if len(hits) == 1 else None


def _layers_present(names: Iterable[str]) -> str:
    found = sorted({int(m.group(1)) for name in names
                    for m in [re.search(r"(?:layer|layers|h|block)\.(\d+)\.", name)] if m})
    return f"layers {found[0]}-{found[-1]}" if found else "no numbered layers"


def safetensors_weights(path: Path, spec: ModelSpec, layer: int, dtype: np.dtype) -> Weights:
    """Layer ``layer``'s FFN from a Hugging Face checkpoint: a ``.safetensors`` file, a
    ``model.safetensors.index.json`` or a model folder. Only the shards holding the layer's
    tensors are opened, and only those tensors are read."""
    family = "t5-gated" if spec.family == "t5" and spec.ffn.gated else spec.family
    layout = LAYOUTS.get(family)
    if layout is None:
        raise WeightsError(f"no checkpoint layout for family '{spec.family}'; known: "
                           f"{', '.join(k for k in LAYOUTS if k != 't5-gated')}")
    checkpoint = open_checkpoint(path)
    path = checkpoint.path
    source = str(path)

    def tensor(stem: str, required: bool) -> np.ndarray | None:
        name = find_tensor(checkpoint.shard_of, stem)
        if name is None:
            if required:
                raise WeightsError(f"{path}: no tensor '{stem}' for layer {layer} (the file "
                                   f"has {_layers_present(checkpoint.shard_of)})")
            return None
        array = read_tensor(*checkpoint.tensor(name))
        return array.T if layout.linear and array.ndim == 2 else array

    def expert(e: int) -> ExpertWeights:
        arrays: dict[str, np.ndarray | None] = {}
        for ours, stem in layout.names.items():
            stem = stem.format(i=layer, e=e)
            arrays[ours] = tensor(stem + ".weight", required=True)
            bias_name = BIAS_OF[ours]
            arrays[bias_name] = tensor(stem + ".bias", required=False)
        if layout.gate_up is not None:
            fused = tensor(layout.gate_up.format(i=layer) + ".weight", required=True)
            assert fused is not None  # required
            f = spec.ffn.d_ff
            if fused.shape != (spec.d_model, 2 * f):
                raise WeightsError(f"{path}: '{layout.gate_up.format(i=layer)}.weight': "
                                   f"expected shape {(2 * f, spec.d_model)}, got "
                                   f"{fused.shape[::-1]}")
            arrays["w"], arrays["v"] = fused[:, :f], fused[:, f:]  # (d, 2f) -> gate, up
        return assemble(source, spec, dtype, arrays.get)

    if layout.router is None:
        if spec.ffn.is_moe:
            raise WeightsError(f"{path}: the {spec.family} layout holds one dense FFN per "
                               f"layer, not {spec.ffn.experts} experts; the what-if options "
                               "cannot change the weights a file holds")
        return expert(0)
    ffn = spec.ffn
    router = tensor(layout.router.format(i=layer) + ".weight", required=True)
    assert router is not None  # required
    router = checked(source, "router", router, (spec.d_model, ffn.experts), dtype)
    experts = tuple(expert(e) for e in range(ffn.experts))
    return MoEWeights(router, None, experts, ffn.top_k, ffn.capacity_factor)
