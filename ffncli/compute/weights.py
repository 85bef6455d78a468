"""TODO: compute.weights (from quantised, gguf, weights)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from ffncli.base.files import open_file
from ffncli.compute.ffn import DenseWeights, ExpertWeights, GatedWeights, MoEWeights, Weights
from ffncli.compute.memory import check_budget
from ffncli.errors import WeightsError
from ffncli.formats import gguf, quantised, safetensors
from ffncli.formats.gguf import GgufHeader
from ffncli.formats.npz import npz_members, open_zip
from ffncli.formats.quantised import _runnable, quantised_linears, recognise
from ffncli.formats.safetensors import find_tensor, open_checkpoint, read_tensor
from ffncli.specs.archs import ffn_layout, with_ffn_layout
from ffncli.specs.spec import ModelSpec


def quantised_layer_weights(path: Path, spec: ModelSpec, layer: int,
                            dtype: np.dtype) -> Weights | None:
    """Layer ``layer``'s FFN from a GPTQ or AWQ checkpoint, dequantised; None for a file that
    holds no quantised tensors (read as a plain checkpoint). bitsandbytes, 3-bit GPTQ, other
    AWQ widths and packed mixtures of experts are refused in one line."""
    header = safetensors.read_header(path)
    if not recognise(header):
        return None
    linears = quantised_linears(header)
    refused = sorted({lin.scheme for lin in linears if not _runnable(lin)})
    layout = ffn_layout(spec)
    if refused or layout is None or layout.router is not None or layout.gate_up is not None:
        schemes = ", ".join(refused or sorted({lin.scheme for lin in linears}))
        raise WeightsError(f"{path}: {schemes} quantised weights are not dequantised; run, "
                           "relu-stats and permute-check dequantise GPTQ (2, 4, 8-bit) and AWQ "
                           "4-bit dense FFNs (params counts this file)")
    by_prefix = {lin.name.removesuffix(".weight"): lin for lin in linears}
    arrays: dict[str, np.ndarray | None] = {}
    for ours, stem in layout.names.items():
        stem = stem.format(i=layer)
        hits = [p for p in by_prefix if p == stem or p.endswith("." + stem)]
        if len(hits) == 1:
            arrays[ours] = quantised.dequantised(header, by_prefix[hits[0]])
        else:
            name = find_tensor(header.tensors, stem + ".weight")
            if name is None:
                raise WeightsError(f"{path}: no tensor '{stem}.qweight' or '{stem}.weight' "
                                   f"for layer {layer}")
            array = read_tensor(header, header.tensors[name])
            arrays[ours] = array.T if layout.linear and array.ndim == 2 else array
        bias = find_tensor(header.tensors, stem + ".bias")
        arrays[BIAS_OF[ours]] = None if bias is None else \
            read_tensor(header, header.tensors[bias])
    return assemble(str(path), spec, dtype, arrays.get)


def _gguf_layers(header: GgufHeader) -> str:
    found = sorted({int(n.split(".")[1]) for n in header.tensors
                    if n.startswith("blk.") and n.split(".")[1].isdigit()})
    return f"layers {found[0]}-{found[-1]}" if found else "no blk.N layers"


def gguf_layer_weights(path: Path, spec: ModelSpec, layer: int, dtype: np.dtype,
                  header: GgufHeader | None = None) -> Weights:
    """Layer ``layer``'s FFN: ``blk.N.ffn_gate`` (activated), ``ffn_up``, ``ffn_down`` (or
    ``ffn_up`` and ``ffn_down`` for a two-matrix FFN), with their biases when present; a
    mixture of experts has ``ffn_gate_inp`` (the router) and ``ffn_{gate,up,down}_exps``.
    GGUF matrices are [out, in] arrays, transposed to ffncli's [in, out]."""
    if header is None:  # a caller walking every layer passes the header it has read once
        header = gguf.read_header(path)
    source, d, f = str(path), spec.d_model, spec.ffn.d_ff

    def tensor(stem: str, required: bool = True) -> np.ndarray | None:
        name = f"blk.{layer}.{stem}"
        t = header.tensors.get(name)
        if t is None:
            if required:
                raise WeightsError(f"{path}: no tensor '{name}' for layer {layer} (the file "
                                   f"has {_gguf_layers(header)})")
            return None
        return gguf.dequantised(header, t)

    def matrix(stem: str, shape: tuple[int, int]) -> np.ndarray:
        array = tensor(stem + ".weight")
        assert array is not None  # required
        return checked(source, f"blk.{layer}.{stem}.weight", array.T, shape, dtype)

    def bias(stem: str, n: int) -> np.ndarray | None:
        array = tensor(stem + ".bias", required=False)
        return None if array is None else checked(source, f"blk.{layer}.{stem}.bias", array,
                                                   (n,), dtype)

    ffn = spec.ffn
    has_gate = f"blk.{layer}.ffn_gate.weight" in header.tensors
    has_router = f"blk.{layer}.ffn_gate_inp.weight" in header.tensors
    has_layer = any(name.startswith(f"blk.{layer}.ffn_") for name in header.tensors)
    if has_layer and (has_router != ffn.is_moe or (not ffn.is_moe and has_gate != ffn.gated)):
        kind = "a mixture of experts" if has_router else "a gated FFN" if has_gate else \
            "a two-matrix FFN (a fused ffn_up, as phi3's, is counted, not run)"
        raise WeightsError(f"{path}: layer {layer} holds {kind}, not the {ffn.label}"
                           f"{' mixture of experts' if ffn.is_moe else ' FFN'} of the spec; "
                           "the what-if options cannot change the weights a file holds")
    if ffn.is_moe:
        router = matrix("ffn_gate_inp", (d, ffn.experts))
        stacks = {stem: tensor(f"ffn_{stem}_exps.weight") for stem in ("gate", "up", "down")}
        experts = []
        for e in range(ffn.experts):
            def one(stem: str, shape: tuple[int, int], e: int = e) -> np.ndarray:
                stack = stacks[stem]
                assert stack is not None  # required
                name = f"blk.{layer}.ffn_{stem}_exps.weight"
                if stack.ndim != 3 or stack.shape[0] != ffn.experts:
                    raise WeightsError(f"{path}: '{name}': expected {ffn.experts} experts of "
                                       f"shape {shape[::-1]}, got shape {stack.shape}")
                return checked(source, name, stack[e].T, shape, dtype)
            experts.append(GatedWeights(one("gate", (d, f)), None, one("up", (d, f)), None,
                                        one("down", (f, d)), None))
        return MoEWeights(router, None, tuple(experts), ffn.top_k, ffn.capacity_factor)
    if ffn.gated:
        return GatedWeights(matrix("ffn_gate", (d, f)), bias("ffn_gate", f),
                            matrix("ffn_up", (d, f)), bias("ffn_up", f),
                            matrix("ffn_down", (f, d)), bias("ffn_down", d))
    return DenseWeights(matrix("ffn_up", (d, f)), bias("ffn_up", f),
                        matrix("ffn_down", (f, d)), bias("ffn_down", d))


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


def npz_weights(path: Path, spec: ModelSpec, dtype: np.dtype) -> Weights:
    """Arrays ``w1 b1 w2 b2`` (dense), ``w b v c w2 b2`` (gated, W activated), all [in, out];
    biases optional. Mixture of experts: ``router`` (d_model x E), optional ``router_bias``,
    and each expert's arrays prefixed ``experts.<e>.``. Every member's header is checked
    when the archive is opened; only the arrays the spec uses are read."""
    with open_file(path, "weights file", WeightsError) as f, open_zip(path, f) as archive:
        members = npz_members(path, archive)
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


def _layers_present(names: Iterable[str]) -> str:
    found = sorted({int(m.group(1)) for name in names
                    for m in [re.search(r"(?:layer|layers|h|block)\.(\d+)\.", name)] if m})
    return f"layers {found[0]}-{found[-1]}" if found else "no numbered layers"


def safetensors_weights(path: Path, spec: ModelSpec, layer: int, dtype: np.dtype) -> Weights:
    """Layer ``layer``'s FFN from a Hugging Face checkpoint: a ``.safetensors`` file, a
    ``model.safetensors.index.json`` or a model folder. Only the shards holding the layer's
    tensors are opened, and only those tensors are read."""
    layout = ffn_layout(spec)
    if layout is None:
        raise WeightsError(f"no checkpoint layout for family '{spec.family}'; known: "
                           f"{', '.join(with_ffn_layout())}")
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
