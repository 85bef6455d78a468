"""Where FFN weights come from: seeded random draws, .npz files, and one layer of an open
checkpoint (safetensors, GPTQ/AWQ, GGUF) through one loader.

Every source returns the ``ffn`` module's weight classes in ``[in, out]`` layout and the
requested dtype, with shapes checked against the spec.

Random draws (``numpy.random.default_rng(init.seed).normal(0, init.std)``, float64, then cast)
happen in this order, biases zero: dense W1 (d_model x d_ff), W2 (d_ff x d_model); gated W,
V, W2; mixture of experts: the router (d_model x experts) first, then each expert in turn, then
the shared expert (shared_d_ff wide) and its gate (d_model) when the spec has them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from ffncli.base.files import open_file
from ffncli.base.validate import LIBRARY_SIZING, Sizing
from ffncli.compute.ffn import (
    DenseWeights,
    ExpertWeights,
    GatedWeights,
    MoEWeights,
    Routing,
    Weights,
)
from ffncli.compute.memory import check_budget
from ffncli.errors import NonfiniteWeightsError, WeightsError
from ffncli.formats.npz import npz_members, open_zip
from ffncli.formats.quantised import runnable
from ffncli.formats.tensors import GgufTensors, Tensors, open_tensors
from ffncli.specs.archs import ffn_layout, with_ffn_layout
from ffncli.specs.layouts import GGUF_FFN, GGUF_GATED_FFN, GGUF_MOE_FFN, Layout
from ffncli.specs.spec import FfnSpec, ModelSpec

# ---------------------------------------------------------------------------------------------
# Random.


def _draw_expert(rng: np.random.Generator, spec: ModelSpec, dtype: np.dtype,
                 width: int | None = None) -> ExpertWeights:
    d, f, std = spec.d_model, width or spec.ffn.d_ff, spec.init.std

    def normal(shape: tuple[int, int]) -> np.ndarray:
        return rng.normal(0, std, shape).astype(dtype, copy=False)

    def zeros(n: int) -> np.ndarray | None:
        return np.zeros(n, dtype=dtype) if spec.ffn.bias else None

    if spec.ffn.gated:
        w, v, w2 = normal((d, f)), normal((d, f)), normal((f, d))
        return GatedWeights(w, zeros(f), v, zeros(f), w2, zeros(d))
    w1, w2 = normal((d, f)), normal((f, d))
    return DenseWeights(w1, zeros(f), w2, zeros(d))


def random_weights(spec: ModelSpec, dtype: np.dtype, budget: int | None = None,
                   names: Sizing = LIBRARY_SIZING, rule: Routing | None = None) -> Weights:
    check_budget(spec, dtype, budget, names)
    rng = np.random.default_rng(spec.init.seed)
    ffn = spec.ffn
    if not ffn.is_moe:
        return _draw_expert(rng, spec, dtype)
    router = rng.normal(0, spec.init.std, (spec.d_model, ffn.experts)).astype(dtype)
    experts = tuple(_draw_expert(rng, spec, dtype) for _ in range(ffn.experts))
    router_bias = np.zeros(ffn.experts, dtype=dtype) if ffn.router_bias else None
    shared = _draw_expert(rng, spec, dtype, ffn.shared_d_ff) if ffn.shared_d_ff else None
    gate = rng.normal(0, spec.init.std, spec.d_model).astype(dtype) if shared is not None \
        and ffn.shared_gate else None
    return MoEWeights(router, router_bias, experts, ffn.top_k, ffn.capacity_factor,
                      rule=rule or Routing(), shared=shared, shared_gate=gate)


# ---------------------------------------------------------------------------------------------
# Shape checks shared by the file readers.


def checked(source: str, name: str, array: np.ndarray, shape: tuple[int, ...],
             dtype: np.dtype, finite: bool = False) -> np.ndarray:
    """``array`` of ``shape``, floating-point, as ``dtype``, contiguous in C or Fortran order
    (a transposed matrix stays a view: BLAS reads either order without a copy); with
    ``finite``, without NaN or infinity."""
    if array.shape != shape:
        raise WeightsError(f"{source}: '{name}': expected shape {shape}, got {array.shape}")
    if array.dtype.kind != "f":
        raise WeightsError(f"{source}: '{name}': expected floating-point values, got "
                           f"{array.dtype}")
    out = np.asarray(array, dtype=dtype)
    if not (out.flags.c_contiguous or out.flags.f_contiguous):
        out = np.ascontiguousarray(out)
    if finite:
        refuse_nonfinite(source, f"array '{name}'", out)
    return out


def refuse_nonfinite(source: str, what: str, array: np.ndarray) -> None:
    """Refuse weights holding NaN or infinity (``what``: ``tensor 'name'``): NaN is never <= 0,
    so every unit it reaches would be counted active, and every output it reaches is NaN.
    Two reductions (min and max carry NaN and infinity), no copy; counted only on the way
    out."""
    if array.size == 0 or (np.isfinite(array.min()) and np.isfinite(array.max())):
        return
    bad = ~np.isfinite(array)
    n = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    at = str(first[0]) if len(first) == 1 else f"({', '.join(map(str, first))})"
    raise NonfiniteWeightsError(f"{source}: {what} holds {n:,} NaN or infinite "
                                f"value{'s' if n > 1 else ''}, the first at index {at}")


# Each matrix's bias, in ffncli's names: w1 b1 w2 b2 (dense), w b v c w2 b2 (gated).
BIAS_OF = {"w1": "b1", "w2": "b2", "w": "b", "v": "c"}


def assemble(source: str, spec: ModelSpec, dtype: np.dtype,
              get: Callable[[str], np.ndarray | None], prefix: str = "",
              finite: bool = False, ffn: FfnSpec | None = None) -> ExpertWeights:
    """Build one expert from named [in, out] arrays: w1 b1 w2 b2, or w b v c w2 b2 (with
    ``finite``, each refused if it holds NaN or infinity); ``ffn``: its FFN (the spec's, or a
    layer's own, or a shared expert's), whose width and gating it has."""
    ffn = ffn or spec.ffn
    d, f = spec.d_model, ffn.d_ff

    def need(name: str, shape: tuple[int, ...]) -> np.ndarray:
        array = get(prefix + name)
        if array is None:
            raise WeightsError(f"{source}: missing array '{prefix + name}'")
        return checked(source, prefix + name, array, shape, dtype, finite)

    def maybe(name: str, n: int) -> np.ndarray | None:
        array = get(prefix + name)
        return None if array is None else checked(source, prefix + name, array, (n,), dtype,
                                                  finite)

    if ffn.gated:
        return GatedWeights(need("w", (d, f)), maybe("b", f), need("v", (d, f)), maybe("c", f),
                            need("w2", (f, d)), maybe("b2", d))
    return DenseWeights(need("w1", (d, f)), maybe("b1", f), need("w2", (f, d)), maybe("b2", d))


def npz_weights(path: Path, spec: ModelSpec, dtype: np.dtype, finite: bool = True,
                rule: Routing | None = None) -> Weights:
    """Arrays ``w1 b1 w2 b2`` (dense), ``w b v c w2 b2`` (gated, W activated), all [in, out];
    biases optional. Mixture of experts (routed by ``rule``, default Mixtral's): ``router``
    (d_model x E), optional ``router_bias``, each expert's arrays prefixed ``experts.<e>.``,
    a shared expert's ``shared.`` and its gate ``shared_gate`` (d_model) where the spec has
    them. Every member's header is checked
    when the archive is opened; only the arrays the spec uses are read, each refused if it
    holds NaN or infinity (unless not ``finite``)."""
    with open_file(path, "weights file", WeightsError) as f, open_zip(path, f) as archive:
        members = npz_members(path, archive)
        asked: set[str] = set()

        def get(name: str) -> np.ndarray | None:
            asked.add(name)
            return members.get(name)  # type: ignore[return-value]  # read by np.asarray

        weights = _npz_assemble(path, spec, dtype, get, finite, rule or Routing())
        unused = sorted(set(members) - asked)
        if unused:  # a misspelt bias would otherwise be left out without a word
            raise WeightsError(f"{path}: unexpected array{'s' if len(unused) > 1 else ''} "
                               f"{', '.join(repr(n) for n in unused)}; a {spec.ffn.label} FFN "
                               f"reads {', '.join(repr(n) for n in sorted(asked))}")
        return weights


def _npz_assemble(path: Path, spec: ModelSpec, dtype: np.dtype,
                  get: Callable[[str], np.ndarray | None], finite: bool,
                  rule: Routing) -> Weights:
    source = str(path)
    ffn = spec.ffn
    if not ffn.is_moe:
        return assemble(source, spec, dtype, get, finite=finite)
    router = get("router")
    if router is None:
        raise WeightsError(f"{path}: missing array 'router'")
    router = checked(source, "router", router, (spec.d_model, ffn.experts), dtype, finite)
    rb = get("router_bias")
    rb = None if rb is None else checked(source, "router_bias", rb, (ffn.experts,), dtype,
                                         finite)
    experts = tuple(assemble(source, spec, dtype, get, f"experts.{e}.", finite)
                    for e in range(ffn.experts))
    shared = gate = None
    if ffn.shared_d_ff:
        shared = assemble(source, spec, dtype, get, "shared.", finite,
                          replace(ffn, d_ff=ffn.shared_d_ff))
        raw = get("shared_gate") if ffn.shared_gate else None
        if ffn.shared_gate and raw is None:
            raise WeightsError(f"{path}: missing array 'shared_gate'")
        gate = None if raw is None else checked(source, "shared_gate", raw, (spec.d_model,),
                                                dtype, finite)
    return MoEWeights(router, rb, experts, ffn.top_k, ffn.capacity_factor, rule=rule,
                      shared=shared, shared_gate=gate)


# ---------------------------------------------------------------------------------------------
# One layer's FFN from an open checkpoint: safetensors (float, GPTQ, AWQ) or GGUF.


def layer_ffn(spec: ModelSpec, layer: int) -> FfnSpec:
    """The FFN of decoder layer ``layer``: the spec's, or a dense one where the spec's layer
    kinds say so (DeepSeek's first_k_dense_replace, Qwen's mlp_only_layers)."""
    kinds = spec.decoder_kinds()
    kind = kinds[layer] if layer < len(kinds) else None
    return kind.ffn if kind is not None and kind.ffn is not None else spec.ffn


def layer_weights(tensors: Tensors, spec: ModelSpec, layer: int, dtype: np.dtype,
                  finite: bool = True, rule: Routing | None = None) -> Weights:
    """Layer ``layer``'s FFN, in ffncli's [in, out] layout: the tensors its layout names (the
    architecture table's for a safetensors checkpoint, llama.cpp's for GGUF), each found,
    read (GPTQ and AWQ linears dequantised), refused if it holds NaN or infinity (unless not
    ``finite``; named as the file names it), turned to [in, out] and checked against the
    spec as it is read. Only that layer's tensors are read. A mixture of experts routes by
    ``rule`` (default Mixtral's); its experts are read one matrix each, or from 3-D stacks
    (GGUF's, or transformers 5's fused ``gate_up_proj``/``down_proj``), with its shared
    experts."""
    r = _LayerReader(tensors, spec, layer, dtype, finite)
    ffn = r.ffn
    if r.layout.router is None:
        return r.one(r.layout.names, 0, ffn.d_ff, ffn)
    router, router_bias = r.router()
    shared, shared_gate = r.shared()
    return MoEWeights(router, router_bias, r.experts(), ffn.top_k, ffn.capacity_factor,
                      rule=rule or Routing(), shared=shared, shared_gate=shared_gate,
                      choice_bias=r.choice_bias())


class _LayerReader:
    """One layer's FFN tensors read from an open checkpoint by its layout (see
    :func:`layer_weights`): each method reads one part (an FFN stored a matrix each, the
    router, the experts in one of their layouts, the shared experts, the choice bias)."""

    def __init__(self, tensors: Tensors, spec: ModelSpec, layer: int, dtype: np.dtype,
                 finite: bool) -> None:
        self.tensors, self.spec, self.layer, self.dtype, self.finite = \
            tensors, spec, layer, dtype, finite
        self.ffn = ffn = layer_ffn(spec, layer)
        self.gguf_names = isinstance(tensors, GgufTensors)  # errors name GGUF tensors, or ours
        self.layout = _gguf_layout(tensors, spec, layer, ffn) if isinstance(
            tensors, GgufTensors) else _checkpoint_layout(tensors, spec, ffn)
        self.linears = tensors.quantised_linears()
        self.source, self.d, self.f = str(tensors.path), spec.d_model, ffn.d_ff

    def read(self, stem: str, required: bool = True) -> np.ndarray | None:
        """A tensor, matrices as [in, out] (nn.Linear's [out, in] transposed)."""
        tensors, prefix = self.tensors, stem.removesuffix(".weight")
        if self.linears and stem.endswith(".weight"):
            hits = [p for p in self.linears if p == prefix or p.endswith("." + prefix)]
            if len(hits) == 1:
                linear = self.linears[hits[0]]
                dequantised = tensors.dequantised(linear)  # already [in, out]
                if self.finite:
                    refuse_nonfinite(self.source, f"the {linear.scheme} linear '{hits[0]}', "
                                     "dequantised,", dequantised)
                return dequantised
        name = tensors.find(stem)
        if name is None:
            if not required:
                return None
            if self.linears:
                raise WeightsError(f"{tensors.path}: no tensor '{prefix}.qweight' or "
                                   f"'{stem}' for layer {self.layer}")
            raise WeightsError(f"{tensors.path}: no tensor '{stem}' for layer {self.layer} "
                               f"(the file has {tensors.layers_present()})")
        array = tensors.read(name)
        if self.finite:
            # indices as stored; in the dtype computed with (float64 past float32's range too)
            refuse_nonfinite(self.source, f"tensor '{name}'", array.astype(self.dtype,
                                                                           copy=False))
        return array.T if self.layout.linear and array.ndim == 2 else array

    def need(self, stem: str) -> np.ndarray:
        array = self.read(stem)
        assert array is not None  # required
        return array

    def shape_of(self, ours: str, width: int) -> tuple[int, int]:
        return (width, self.d) if ours == "w2" else (self.d, width)

    def one(self, names: dict[str, str], e: int, width: int, part: FfnSpec) -> ExpertWeights:
        """An FFN stored one matrix (and bias) each: the dense FFN, an expert, the shared."""
        arrays: dict[str, np.ndarray | None] = {}
        source, d = self.source, self.d
        for ours, stem_format in names.items():
            stem = stem_format.format(i=self.layer, e=e)
            label = stem + ".weight" if self.gguf_names else ours
            arrays[ours] = checked(source, label, self.need(stem + ".weight"),
                                   self.shape_of(ours, width), self.dtype)
            bias = self.read(stem + ".bias", required=False)
            label = stem + ".bias" if self.gguf_names else BIAS_OF[ours]
            arrays[BIAS_OF[ours]] = None if bias is None else \
                checked(source, label, bias, (d,) if ours == "w2" else (width,), self.dtype)
        if self.layout.gate_up is not None:
            arrays["w"], arrays["v"] = _gate_up(self.read,
                                                self.layout.gate_up.format(i=self.layer),
                                                self.spec, source)
        return assemble(source, self.spec, self.dtype, arrays.get, ffn=part)

    def router(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The router (d_model, experts), and its bias where the spec has one."""
        ffn, stem = self.ffn, self.layout.router.format(i=self.layer)  # type: ignore[union-attr]
        name = stem + ".weight"
        router = checked(self.source, name if self.gguf_names else "router", self.need(name),
                         (self.d, ffn.experts), self.dtype)
        bias = self.read(stem + ".bias", required=False) if ffn.router_bias else None
        if bias is not None:
            bias = checked(self.source, "router_bias", bias, (ffn.experts,), self.dtype)
        return router, bias

    def experts(self) -> tuple[ExpertWeights, ...]:
        """The routed experts: GGUF's stacks, transformers 5's fused stacks, or a matrix each."""
        layout, ffn, n = self.layout, self.ffn, self.ffn.experts
        if layout.stacked:  # GGUF: (experts, out, in) each
            names = {ours: stem.format(i=self.layer, e=0) for ours, stem in layout.names.items()}
            stacks = {ours: self.stacked(stem + ".weight", *self.shape_of(ours, self.f)[::-1])
                      for ours, stem in names.items()}
            return tuple(self.from_stacks(stacks, names, {}, e) for e in range(n))
        if layout.fused is not None:
            fused = layout.fused["gate_up"].format(i=self.layer)
            if self.tensors.find(fused) or self.tensors.find(fused + "_blocks"):
                return self.fused_experts()
        return tuple(self.one(layout.names, e, self.f, ffn) for e in range(n))

    def fused_experts(self) -> tuple[ExpertWeights, ...]:
        """transformers 5's fused stacks: gate and up in one (halves, or interleaved as
        gpt-oss's), the down projection in another, each with its (experts, width) bias."""
        layout, f = self.layout, self.f
        assert layout.fused is not None  # the caller found them
        gate_up = self.fused_stack("gate_up", 2 * f, self.d)
        down = self.fused_stack("w2", self.d, f)
        gates, ups = (slice(0, None, 2), slice(1, None, 2)) if layout.fused_interleaved else \
            (slice(0, f), slice(f, None))
        stacks = {"w": gate_up[:, gates], "v": gate_up[:, ups], "w2": down}  # gate, up rows
        biases: dict[str, np.ndarray] = {}
        for ours, key in (("w", "gate_up"), ("w2", "w2")):
            name = self.tensors.find(layout.fused[key].format(i=self.layer) + "_bias")
            if name is not None:  # (experts, width): read as stored
                bias = self.tensors.read(name)
                if ours == "w":
                    biases["v"] = bias[:, ups]
                    bias = bias[:, gates]
                biases[ours] = bias
        names = {ours: layout.fused["w2" if ours == "w2" else "gate_up"].format(i=self.layer)
                 for ours in stacks}
        return tuple(self.from_stacks(stacks, names, biases, e)
                     for e in range(self.ffn.experts))

    def from_stacks(self, stacks: dict[str, np.ndarray], names: dict[str, str],
                    biases: dict[str, np.ndarray], e: int) -> ExpertWeights:
        source, dtype = self.source, self.dtype
        arrays = {ours: checked(source, stem + ".weight" if self.gguf_names else ours,
                                stacks[ours][e].T, self.shape_of(ours, self.f), dtype)
                  for ours, stem in names.items()}
        for ours, bias in biases.items():  # gpt-oss's, (experts, width) each
            arrays[BIAS_OF[ours]] = checked(source, BIAS_OF[ours], bias[e],
                                            (self.d if ours == "w2" else self.f,), dtype,
                                            self.finite)
        return assemble(source, self.spec, dtype, arrays.get, ffn=self.ffn)

    def stacked(self, name: str, rows: int, cols: int) -> np.ndarray:
        """Every expert's matrix in one (experts, rows, cols) tensor, as stored."""
        stack, n = self.need(name), self.ffn.experts
        if stack.ndim != 3 or stack.shape[0] != n:
            raise WeightsError(f"{self.source}: '{name}': expected {n} experts of shape "
                               f"{(rows, cols)}, got shape {stack.shape}")
        return stack

    def fused_stack(self, key: str, rows: int, cols: int) -> np.ndarray:
        """A fused (experts, rows, cols) stack, [out, in] each: as stored, turned from
        [experts, in, out] (gpt-oss, Llama 4), or dequantised from MXFP4 (gpt-oss as
        published, whose blocks are [out, in])."""
        stem = self.layout.fused[key].format(i=self.layer)  # type: ignore[index]  # checked
        packed = self.tensors.mxfp4(stem)
        if packed is not None:
            n = self.ffn.experts
            if packed.ndim != 3 or packed.shape[0] != n:
                raise WeightsError(f"{self.source}: '{stem}' (MXFP4): expected {n} experts of "
                                   f"shape {(rows, cols)}, got shape {packed.shape}")
            if self.finite:
                refuse_nonfinite(self.source, f"the MXFP4 tensor '{stem}', dequantised,", packed)
            return packed
        stack = self.stacked(stem, rows, cols)
        return stack.swapaxes(1, 2) if self.layout.fused_in_out else stack

    def shared(self) -> tuple[ExpertWeights | None, np.ndarray | None]:
        """The shared experts (one FFN of the shared width) and Qwen2-MoE's sigmoid gate."""
        layout, ffn = self.layout, self.ffn
        shared = gate = None
        if layout.shared is not None and ffn.shared_d_ff:
            shared = self.one(layout.shared, 0, ffn.shared_d_ff,
                              replace(ffn, d_ff=ffn.shared_d_ff))
        if layout.shared_gate is not None and ffn.shared_gate:
            name = layout.shared_gate.format(i=self.layer) + ".weight"
            gate = checked(self.source, name if self.gguf_names else "shared_gate",
                           self.need(name), (self.d, 1), self.dtype)[:, 0]
        return shared, gate

    def choice_bias(self) -> np.ndarray | None:
        """DeepSeek-V3's and GLM-4.5's e_score_correction_bias, for choosing only."""
        if self.layout.choice_bias is None:
            return None
        name = self.layout.choice_bias.format(i=self.layer)
        return checked(self.source, name if self.gguf_names else "choice_bias", self.need(name),
                       (self.ffn.experts,), self.dtype)


def checkpoint_weights(path: Path, spec: ModelSpec, layer: int, dtype: np.dtype,
                       finite: bool = True) -> Weights:
    """:func:`layer_weights` of the checkpoint at ``path``, opened for the call."""
    with open_tensors(path) as tensors:
        return layer_weights(tensors, spec, layer, dtype, finite)


def _gate_up(read: Callable[..., np.ndarray | None], stem: str, spec: ModelSpec,
             source: str) -> tuple[np.ndarray, np.ndarray]:
    """Phi-3's fused [2 d_ff, d_model] matrix: gate rows, then up rows."""
    fused = read(stem + ".weight")
    assert fused is not None  # required
    f = spec.ffn.d_ff
    if fused.shape != (spec.d_model, 2 * f):
        raise WeightsError(f"{source}: '{stem}.weight': expected shape {(2 * f, spec.d_model)}, "
                           f"got {fused.shape[::-1]}")
    return fused[:, :f], fused[:, f:]  # (d, 2f) -> gate, up


def _check_quantised(tensors: Tensors, layout: Layout | None) -> None:
    """Quantised linears are read only as GPTQ (2, 4, 8-bit) or AWQ 4-bit, in a dense FFN."""
    linears = tensors.quantised_linears().values()
    if not linears:
        return
    refused = sorted({lin.scheme for lin in linears if not runnable(lin)})
    if refused or layout is None or layout.router is not None or layout.gate_up is not None:
        schemes = ", ".join(refused or sorted({lin.scheme for lin in linears}))
        raise WeightsError(f"{tensors.path}: {schemes} quantised weights are not dequantised; "
                           "run, relu-stats and permute-check dequantise GPTQ (2, 4, 8-bit) and "
                           "AWQ 4-bit dense FFNs (params counts this file)")


def _checkpoint_layout(tensors: Tensors, spec: ModelSpec, ffn: FfnSpec) -> Layout:
    """The architecture table's layout of the spec's family for a layer whose FFN is ``ffn``
    (a mixture's dense layers have a layout of their own), refused where it cannot be read:
    quantised linears other than GPTQ (2, 4, 8-bit) and AWQ 4-bit, or in an FFN that is not
    dense; a mixture of experts where the layout holds one FFN."""
    layout = ffn_layout(spec)
    if layout is not None and layout.dense is not None and not ffn.is_moe:
        layout = layout.dense
    _check_quantised(tensors, layout)
    if layout is None:
        raise WeightsError(f"no checkpoint layout for family '{spec.family}'; known: "
                           f"{', '.join(with_ffn_layout())}")
    if layout.router is None and ffn.is_moe:
        raise WeightsError(f"{tensors.path}: the {spec.family} layout holds one dense FFN per "
                           f"layer, not {ffn.experts} experts; the what-if options "
                           "cannot change the weights a file holds")
    return layout


def _gguf_layout(tensors: GgufTensors, spec: ModelSpec, layer: int, ffn: FfnSpec) -> Layout:
    """llama.cpp's names for the layer's kind of FFN, which must be the spec's (``ffn``)."""
    names = tensors.header.tensors
    has_gate = f"blk.{layer}.ffn_gate.weight" in names
    has_router = f"blk.{layer}.ffn_gate_inp.weight" in names
    has_layer = any(name.startswith(f"blk.{layer}.ffn_") for name in names)
    if has_layer and (has_router != ffn.is_moe or (not ffn.is_moe and has_gate != ffn.gated)):
        kind = "a mixture of experts" if has_router else "a gated FFN" if has_gate else \
            "a two-matrix FFN (a fused ffn_up, as phi3's, is counted, not run)"
        raise WeightsError(f"{tensors.path}: layer {layer} holds {kind}, not the {ffn.label}"
                           f"{' mixture of experts' if ffn.is_moe else ' FFN'} of the spec; "
                           "the what-if options cannot change the weights a file holds")
    return GGUF_MOE_FFN if ffn.is_moe else GGUF_GATED_FFN if ffn.gated else GGUF_FFN
