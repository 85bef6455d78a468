"""Quantised checkpoints: the parameters a model has, apart from the bytes it stores them in.

GPTQ and AWQ replace a linear layer's ``weight`` by int32-packed ``qweight`` (GPTQ packs along
the input, ``[in * bits / 32, out]``; AWQ along the output, ``[in, out * bits / 32]``), with
``qzeros`` ``[groups, out * bits / 32]``, ``scales`` ``[groups, out]`` and, for GPTQ,
``g_idx`` ``[in]``. bitsandbytes keeps ``weight`` as int8 beside its row scales ``SCB`` (8-bit),
or as uint8 holding two 4-bit values a byte beside ``weight.absmax``, ``weight.quant_map`` and
``weight.quant_state.*`` (4-bit, NF4 or FP4). The layer has ``in x out`` parameters either
way; the rest is how they are stored. Here: the quantised linears a header holds, and GPTQ
and AWQ layers dequantised (``ffncli.counting.files`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from ffncli.base.files import kept_or_opened, read_at
from ffncli.base.validate import PARAMETERS, Words, brief
from ffncli.errors import WeightsError
from ffncli.formats.safetensors import Header, TensorInfo, read_tensor

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Linear:
    name: str  # the logical weight, <prefix>.weight
    scheme: str
    params: int
    parts: tuple[TensorInfo, ...]  # the tensors that store it
    bits: int = 0  # GPTQ and AWQ
    shape: tuple[int, int] = (0, 0)  # GPTQ and AWQ: (in, out)


# transformers' quantization_config.quant_method of the layouts read here (QuantizationMethod)
QUANT_METHODS = ("gptq", "awq", "bitsandbytes", "mxfp4")


def check_quant_method(config: Any, source: str, words: Words = PARAMETERS) -> None:
    """A checkpoint's config.json (its document, ``source`` its file) says how its weights
    are stored in ``quantization_config``: absent or null (plain tensors), or a method whose
    tensors are read here. Any other method (fp8, compressed-tensors, hqq, ...) stores tensors
    whose names and dtypes mean something else: counted by name they would be buffers and a
    mismatch, so they are refused. As transformers reads it: ``load_in_8bit``/``load_in_4bit``
    without a method is bitsandbytes, a config without either is refused. ``words`` name
    ``weights`` (a command's: ``--weights``)."""
    if not isinstance(config, dict) or config.get("quantization_config") is None:
        return
    quant = config["quantization_config"]
    where = f"{source}: key 'quantization_config'"
    if not isinstance(quant, dict):
        raise WeightsError(f"{where}: expected an object with a quant_method, got {brief(quant)}")
    method = quant.get("quant_method")
    if method is None and (quant.get("load_in_8bit") is True or quant.get("load_in_4bit") is True):
        return  # bitsandbytes, as transformers took it before quant_method
    if method not in QUANT_METHODS:
        told = "no quant_method" if method is None else f"quant_method {brief(method)}"
        raise WeightsError(f"{where}: {told} is not read; ffncli reads the weights of "
                           f"{', '.join(repr(m) for m in QUANT_METHODS)} (without "
                           f"{words.name('weights')}, params counts the config's spec)")


_MARKERS = (".qweight", ".qzeros", ".SCB", ".absmax", ".quant_map")
_GPTQ_PARTS = ("qweight", "qzeros", "scales", "g_idx")


def recognise(header: Header) -> bool:
    """Does the file hold GPTQ, AWQ or bitsandbytes tensors?"""
    return any(name.endswith(_MARKERS) for name in header.tensors)


def _packed(header: Header, prefix: str) -> Linear:
    """GPTQ or AWQ: the bits from qzeros against scales, the packing axis from qweight."""
    t = header.tensors
    where = f"{header.path}: quantised layer '{prefix}'"
    missing = [p for p in ("qweight", "qzeros", "scales") if f"{prefix}.{p}" not in t]
    if missing:
        raise WeightsError(f"{where}: a quantised layout it does not know: no tensor "
                           f"{' or '.join(missing)} (GPTQ and AWQ store qweight, qzeros and "
                           "scales)")
    q, z, s = t[f"{prefix}.qweight"], t[f"{prefix}.qzeros"], t[f"{prefix}.scales"]
    shapes = f"qweight {list(q.shape)}, qzeros {list(z.shape)}, scales {list(s.shape)}"
    bits = _bits(where, shapes, q, z, s)
    out = s.shape[1]
    if q.shape[1] == out and (q.shape[0] * 32) % bits == 0:
        scheme, n_in = "GPTQ", q.shape[0] * 32 // bits
    elif q.shape[1] * 32 == out * bits:
        scheme, n_in = "AWQ", q.shape[0]
    else:
        raise WeightsError(f"{where}: a quantised layout it does not know ({shapes}): "
                           f"qweight is packed along neither axis for {bits}-bit")
    parts = tuple(t[f"{prefix}.{p}"] for p in _GPTQ_PARTS if f"{prefix}.{p}" in t)
    return Linear(f"{prefix}.weight", f"{scheme} {bits}-bit", n_in * out, parts, bits,
                   (n_in, out))


def _bits(where: str, shapes: str, q: TensorInfo, z: TensorInfo, s: TensorInfo) -> int:
    """The bits of a GPTQ or AWQ layer: qzeros' packed columns against the scales'."""
    ok = (q.dtype == "I32" and z.dtype == "I32" and len(q.shape) == len(z.shape) == 2
          and len(s.shape) == 2 and s.shape[1] > 0 and z.shape[0] == s.shape[0])
    bits = (z.shape[1] * 32) // s.shape[1] if ok else 0
    if not ok or bits not in (2, 3, 4, 8) or z.shape[1] * 32 != bits * s.shape[1]:
        raise WeightsError(f"{where}: a quantised layout it does not know ({shapes}); "
                           "expected int32 GPTQ qweight [in*bits/32, out] or AWQ qweight "
                           "[in, out*bits/32], qzeros [groups, out*bits/32], scales "
                           "[groups, out], bits 2, 3, 4 or 8")
    if s.shape[0] == 0:  # nothing to scale the inputs by: no weights, though in x out are counted
        raise WeightsError(f"{where}: no groups ({shapes}); expected at least one group of "
                           "inputs, each with its row of scales and zeros")
    return bits


def _bnb_kind(extras: list[str]) -> str:
    """A bitsandbytes 4-bit weight's kind, as its quant_state tensor names it."""
    for kind in ("nf4", "fp4"):
        if any(n.endswith(f"bitsandbytes__{kind}") for n in extras):
            return kind
    return "4-bit"


def _bitsandbytes(header: Header, prefix: str) -> Linear:
    """int8 ``weight`` + ``SCB``, or uint8 ``weight`` (two 4-bit values a byte) + ``absmax``."""
    t = header.tensors
    name = f"{prefix}.weight"
    weight = t.get(name)
    extras = [n for n in t if n.startswith(name + ".") or n in (f"{prefix}.SCB",
                                                                f"{prefix}.weight_format")]
    parts = tuple([weight] if weight else []) + tuple(t[n] for n in extras)
    if weight is not None and weight.dtype == "I8" and f"{prefix}.SCB" in t:
        return Linear(name, "bitsandbytes int8", weight.numel, parts)
    if weight is not None and weight.dtype == "U8" and f"{name}.absmax" in t:
        return Linear(name, f"bitsandbytes {_bnb_kind(extras)}", 2 * weight.numel, parts)
    got = "no such tensor" if weight is None else f"{weight.dtype} {list(weight.shape)}"
    raise WeightsError(f"{header.path}: tensor '{name}': a quantised layout it does not know "
                       f"({got}); bitsandbytes stores an I8 weight beside SCB, or a U8 weight "
                       "beside weight.absmax")


def quantised_linears(header: Header) -> tuple[Linear, ...]:
    prefixes: dict[str, str] = {}  # prefix -> "packed" or "bnb"
    for name in header.tensors:
        for marker in _MARKERS:
            if name.endswith(marker):
                prefix = name[: -len(marker)].removesuffix(".weight")
                packed = marker in (".qweight", ".qzeros")
                prefixes.setdefault(prefix, "packed" if packed else "bnb")
    return tuple(_packed(header, p) if kind == "packed" else _bitsandbytes(header, p)
                 for p, kind in prefixes.items())


# ---------------------------------------------------------------------------------------------
# Running: GPTQ (2, 4, 8-bit) and AWQ (4-bit) linears dequantised to [in, out] float arrays.

_AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # AWQ packs the 8 columns as 0 2 4 6 1 3 5 7


def runnable(lin: Linear) -> bool:
    return (lin.scheme.startswith("GPTQ") and lin.bits in (2, 4, 8)) or lin.scheme == "AWQ 4-bit"


def _ints(header: Header, info: TensorInfo, file: BinaryIO | None,
          kind: str = "I32") -> np.ndarray:
    """An int32 tensor's bytes, as unsigned 32-bit words in its shape (``kind`` U8: a uint8
    tensor's bytes, MXFP4's)."""
    import numpy as np

    if info.dtype != kind:
        stores = "GPTQ and AWQ store packed words and g_idx as int32" if kind == "I32" else \
            "MXFP4 stores its blocks and scales as uint8"
        raise WeightsError(f"{header.path}: tensor '{info.name}': expected dtype {kind} "
                           f"({stores}), got {info.dtype}")

    data = bytearray(info.end - info.start)
    with kept_or_opened(file, header.path, "weights file", WeightsError) as f:
        got = read_at(f, info.start, memoryview(data))
    if got != len(data):
        raise WeightsError(f"{header.path}: tensor '{info.name}': the file ends inside its "
                           "bytes; was it cut short?")
    return np.frombuffer(data, dtype="<u4" if kind == "I32" else "u1").reshape(info.shape)


def uint8s(header: Header, info: TensorInfo, file: BinaryIO | None = None) -> np.ndarray:
    """A uint8 tensor's bytes in its shape (MXFP4's blocks and scales)."""
    return _ints(header, info, file, "U8")


def _unpack(words: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Each 32-bit word as 32 / bits values, lowest bits first, along ``axis`` (0: rows,
    1: columns)."""
    import numpy as np

    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    mask = np.uint32((1 << bits) - 1)
    rows, cols = words.shape
    if axis == 0:  # (rows, cols) -> (rows, per, cols) -> (rows * per, cols)
        values = (words[:, None, :] >> shifts[None, :, None]) & mask
        return values.reshape(rows * len(shifts), cols)  # shapes spelled out: rows may be 0
    values = (words[:, :, None] >> shifts[None, None, :]) & mask  # (rows, cols, per)
    return values.reshape(rows, cols * len(shifts))


def dequantised(header: Header, lin: Linear, file: BinaryIO | None = None) -> np.ndarray:
    """W[i, o] = scale[g, o] * (q[i, o] - zero[g, o]) with g the group of input row i: GPTQ's
    qweight packs along the input, its zeros are stored minus one, and g_idx names each row's
    group (act-order); AWQ packs along the output in the order 0 2 4 6 1 3 5 7, its groups
    are consecutive rows. Returns [in, out] float32, ffncli's layout. ``file``: the file, kept
    open by the caller."""
    import numpy as np

    prefix, t = lin.name.removesuffix(".weight"), header.tensors
    n_in, n_out = lin.shape
    zeros_words = _ints(header, t[f"{prefix}.qzeros"], file)
    scales = read_tensor(header, t[f"{prefix}.scales"], file=file).astype(np.float32)
    groups = scales.shape[0]
    awq = lin.scheme.startswith("AWQ")
    q = _unpack(_ints(header, t[f"{prefix}.qweight"], file), lin.bits, axis=1 if awq else 0)
    zeros = _unpack(zeros_words, lin.bits, axis=1)
    if awq:
        order = (np.arange(n_out) // 8) * 8 + np.array(_AWQ_REVERSE_ORDER * (n_out // 8))
        q, zeros = q[:, order], zeros[:, order]
    else:
        zeros = zeros + 1
    g_idx = t.get(f"{prefix}.g_idx")
    if g_idx is not None and not awq:
        group = _ints(header, g_idx, file).astype(np.int64)
        if group.shape != (n_in,) or group.min(initial=0) < 0 or \
                group.max(initial=0) >= groups:
            raise WeightsError(f"{header.path}: tensor '{prefix}.g_idx': expected {n_in:,} "
                               f"group numbers from 0 to {groups - 1}")
    elif n_in % groups:
        raise WeightsError(f"{header.path}: quantised layer '{prefix}': {n_in:,} inputs are "
                           f"not {groups} whole groups")
    else:
        group = np.arange(n_in) // (n_in // groups)
    return (q.astype(np.float32) - zeros[group]) * scales[group]  # (in, out)
