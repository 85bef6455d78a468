"""Quantised checkpoints: the parameters a model has, apart from the bytes it stores them in.

GPTQ and AWQ replace a linear layer's ``weight`` by int32-packed ``qweight`` (GPTQ packs along
the input, ``[in * bits / 32, out]``; AWQ along the output, ``[in, out * bits / 32]``), with
``qzeros`` ``[groups, out * bits / 32]``, ``scales`` ``[groups, out]`` and, for GPTQ,
``g_idx`` ``[in]``. bitsandbytes keeps ``weight`` as int8 beside its row scales ``SCB`` (8-bit),
or as uint8 holding two 4-bit values a byte beside ``weight.absmax``, ``weight.quant_map`` and
``weight.quant_state.*`` (4-bit, NF4 or FP4). The layer has ``in x out`` parameters either
way; the rest is how they are stored. Header only: no tensor data is read, no NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ffncli.checkpoint import (
    FLOAT_DTYPES,
    FileCount,
    Header,
    TensorInfo,
    group_of,
    is_buffer,
    read_header,
)
from ffncli.checkpoint import count_file as plain_count
from ffncli.errors import WeightsError


@dataclass(frozen=True)
class Stored:
    """Parameters kept in one storage format, and the bytes they take (with the scales, zero
    points and maps of a quantised format)."""

    kind: str  # a dtype (F16), a GGML type (Q4_1), or a scheme (GPTQ 4-bit)
    params: int
    bytes: int


@dataclass(frozen=True)
class QuantisedCount(FileCount):
    """A file count of quantised (or GGUF) weights: logical parameters by group, and what
    stores them."""

    scheme: str = ""
    stored: tuple[Stored, ...] = ()

    @property
    def stored_bytes(self) -> int:
        return sum(s.bytes for s in self.stored)


@dataclass(frozen=True)
class _Linear:
    name: str  # the logical weight, <prefix>.weight
    scheme: str
    params: int
    parts: tuple[TensorInfo, ...]  # the tensors that store it


_MARKERS = (".qweight", ".qzeros", ".SCB", ".absmax", ".quant_map")
_GPTQ_PARTS = ("qweight", "qzeros", "scales", "g_idx")


def recognise(header: Header) -> bool:
    """Does the file hold GPTQ, AWQ or bitsandbytes tensors?"""
    return any(name.endswith(_MARKERS) for name in header.tensors)


def _nbytes(info: TensorInfo) -> int:
    return info.end - info.start


def _packed(header: Header, prefix: str) -> _Linear:
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
    ok = (q.dtype == "I32" and z.dtype == "I32" and len(q.shape) == len(z.shape) == 2
          and len(s.shape) == 2 and s.shape[1] > 0 and z.shape[0] == s.shape[0])
    bits = (z.shape[1] * 32) // s.shape[1] if ok else 0
    if not ok or bits not in (2, 3, 4, 8) or z.shape[1] * 32 != bits * s.shape[1]:
        raise WeightsError(f"{where}: a quantised layout it does not know ({shapes}); "
                           "expected int32 GPTQ qweight [in*bits/32, out] or AWQ qweight "
                           "[in, out*bits/32], qzeros [groups, out*bits/32], scales "
                           "[groups, out], bits 2, 3, 4 or 8")
    out = s.shape[1]
    if q.shape[1] == out and (q.shape[0] * 32) % bits == 0:
        scheme, n_in = "GPTQ", q.shape[0] * 32 // bits
    elif q.shape[1] * 32 == out * bits:
        scheme, n_in = "AWQ", q.shape[0]
    else:
        raise WeightsError(f"{where}: a quantised layout it does not know ({shapes}): "
                           f"qweight is packed along neither axis for {bits}-bit")
    parts = tuple(t[f"{prefix}.{p}"] for p in _GPTQ_PARTS if f"{prefix}.{p}" in t)
    return _Linear(f"{prefix}.weight", f"{scheme} {bits}-bit", n_in * out, parts)


def _bitsandbytes(header: Header, prefix: str) -> _Linear:
    """int8 ``weight`` + ``SCB``, or uint8 ``weight`` (two 4-bit values a byte) + ``absmax``."""
    t = header.tensors
    name = f"{prefix}.weight"
    weight = t.get(name)
    extras = [n for n in t if n.startswith(name + ".") or n in (f"{prefix}.SCB",
                                                                f"{prefix}.weight_format")]
    parts = tuple([weight] if weight else []) + tuple(t[n] for n in extras)
    if weight is not None and weight.dtype == "I8" and f"{prefix}.SCB" in t:
        return _Linear(name, "bitsandbytes int8", weight.numel, parts)
    if weight is not None and weight.dtype == "U8" and f"{name}.absmax" in t:
        kind = "nf4" if any(n.endswith("bitsandbytes__nf4") for n in extras) else \
            "fp4" if any(n.endswith("bitsandbytes__fp4") for n in extras) else "4-bit"
        return _Linear(name, f"bitsandbytes {kind}", 2 * weight.numel, parts)
    got = "no such tensor" if weight is None else f"{weight.dtype} {list(weight.shape)}"
    raise WeightsError(f"{header.path}: tensor '{name}': a quantised layout it does not know "
                       f"({got}); bitsandbytes stores an I8 weight beside SCB, or a U8 weight "
                       "beside weight.absmax")


def quantised_linears(header: Header) -> tuple[_Linear, ...]:
    prefixes: dict[str, str] = {}  # prefix -> "packed" or "bnb"
    for name in header.tensors:
        for marker in _MARKERS:
            if name.endswith(marker):
                prefix = name[: -len(marker)].removesuffix(".weight")
                packed = marker in (".qweight", ".qzeros")
                prefixes.setdefault(prefix, "packed" if packed else "bnb")
    return tuple(_packed(header, p) if kind == "packed" else _bitsandbytes(header, p)
                 for p, kind in prefixes.items())


def count_file(header: Header) -> QuantisedCount:
    """Logical parameters: each quantised linear as ``in x out``, in the group of its name;
    every other tensor as the plain header count has it."""
    linears = quantised_linears(header)
    packed = {info.name for lin in linears for info in lin.parts}
    rest = plain_count(Header(header.path, {n: i for n, i in header.tensors.items()
                                            if n not in packed}))
    groups = dict(rest.groups)
    stored: dict[str, list[int]] = {}
    for lin in linears:
        groups[group_of(lin.name)] += lin.params
        entry = stored.setdefault(lin.scheme, [0, 0])
        entry[0] += lin.params
        entry[1] += sum(_nbytes(p) for p in lin.parts)
    for info in header.tensors.values():
        if info.name not in packed and not is_buffer(info) and info.dtype in FLOAT_DTYPES:
            entry = stored.setdefault(info.dtype, [0, 0])
            entry[0] += info.numel
            entry[1] += _nbytes(info)
    schemes = sorted({lin.scheme for lin in linears})
    return QuantisedCount(groups, rest.buffers, rest.unplaced, scheme=", ".join(schemes),
                          stored=tuple(Stored(k, p, b) for k, (p, b) in stored.items()))


def check_runnable(path: Path) -> None:
    """``run``, ``relu-stats`` and ``permute-check`` read float weights; packed ones are refused
    in one line (``params`` counts them)."""
    header = read_header(path)
    if not recognise(header):
        return
    linears = quantised_linears(header)
    schemes = ", ".join(sorted({lin.scheme for lin in linears}))
    raise WeightsError(f"{path}: {schemes} quantised weights are not dequantised; run, "
                       "relu-stats and permute-check need F32, F16 or BF16 weights (params "
                       "counts this file)")
