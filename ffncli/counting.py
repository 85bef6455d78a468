"""Parameters, FLOPs and weight memory of a spec: pure integer arithmetic, one function a formula.

Counting follows the reference implementations (Hugging Face classes, the 2017 paper): tied
weights are counted once, buffers never. FLOPs are 2 per multiply-add of the matrix products
(biases, activations, norms and softmax are left out, as in Kaplan et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ffncli.checkpoint import GROUPS, FileCount
from ffncli.spec import AttentionSpec, FfnSpec, ModelSpec, NormSpec

BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "int8": 1}


@dataclass(frozen=True)
class Row:
    """One line of a breakdown: a named weight, its shape and its parameter count."""

    name: str
    shape: str
    params: int


def linear(n_in: int, n_out: int, bias: bool) -> int:
    """x W + b with W of shape (n_in, n_out)."""
    return n_in * n_out + (n_out if bias else 0)


def expert_params(d_model: int, ffn: FfnSpec) -> int:
    """One FFN: W1, W2 (and V when gated), with their biases."""
    up = linear(d_model, ffn.d_ff, ffn.bias)
    down = linear(ffn.d_ff, d_model, ffn.bias)
    return (2 * up if ffn.gated else up) + down


def router_params(d_model: int, ffn: FfnSpec) -> int:
    return linear(d_model, ffn.experts, ffn.router_bias) if ffn.is_moe else 0


def ffn_params(d_model: int, ffn: FfnSpec) -> int:
    return ffn.experts * expert_params(d_model, ffn) + router_params(d_model, ffn)


def ffn_active_params(d_model: int, ffn: FfnSpec) -> int:
    """What one token uses: its top-k experts plus the router."""
    return ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)


def attention_widths(d_model: int, att: AttentionSpec) -> tuple[int, int]:
    """(width of Q and of the output projection's input, width of K and of V)."""
    head_dim = att.head_dim or d_model // att.heads
    return att.heads * head_dim, (att.kv_heads or att.heads) * head_dim


def attention_params(d_model: int, att: AttentionSpec) -> int:
    """W_Q, W_K, W_V, W_O (K and V are kv_heads * head_dim wide under grouped queries)."""
    q_width, kv_width = attention_widths(d_model, att)
    qkv = linear(d_model, q_width, att.qkv_bias) + 2 * linear(d_model, kv_width, att.qkv_bias)
    return qkv + linear(q_width, d_model, att.out_bias)


def norm_params(d_model: int, norm: NormSpec) -> int:
    """A gain vector, plus a bias vector for LayerNorm with bias (RMSNorm has none)."""
    return d_model * (2 if norm.bias and norm.kind == "layernorm" else 1)


# ---------------------------------------------------------------------------------------------
# FLOPs per token, 2 per multiply-add.


def ffn_flops(d_model: int, ffn: FfnSpec) -> int:
    """The matrix products one token goes through: top-k experts and the router."""
    per_expert = (3 if ffn.gated else 2) * d_model * ffn.d_ff
    router = d_model * ffn.experts if ffn.is_moe else 0
    return 2 * (ffn.top_k * per_expert + router)


def attention_projection_flops(d_model: int, att: AttentionSpec) -> int:
    q_width, kv_width = attention_widths(d_model, att)
    return 2 * (2 * d_model * q_width + 2 * d_model * kv_width)


def attention_score_flops(d_model: int, att: AttentionSpec, seq_len: int) -> int:
    """Q K^T and the weighted sum of V, one token against seq_len positions."""
    q_width, _ = attention_widths(d_model, att)
    return 2 * 2 * seq_len * q_width


# ---------------------------------------------------------------------------------------------
# The breakdown of a whole model.


@dataclass(frozen=True)
class Flops:
    ffn: int
    attention_projections: int
    attention_scores: int

    @property
    def total(self) -> int:
        return self.ffn + self.attention_projections + self.attention_scores

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 1.0


@dataclass(frozen=True)
class LayerCount:
    kind: str  # "encoder", "decoder", or "ffn" for an FFN-only spec
    count: int
    ffn_rows: tuple[Row, ...]
    attention_rows: tuple[Row, ...]
    ffn: int
    ffn_active: int
    attention: int  # self-attention, plus cross-attention in an encoder-decoder's decoder
    norm: int
    flops: Flops

    @property
    def total(self) -> int:
        return self.ffn + self.attention + self.norm

    @property
    def active(self) -> int:
        return self.ffn_active + self.attention + self.norm

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total

    @property
    def ffn_active_share(self) -> float:
        return self.ffn_active / self.active


@dataclass(frozen=True)
class ModelCount:
    spec: ModelSpec
    layers: tuple[LayerCount, ...]
    other_rows: tuple[Row, ...]  # embeddings, relative bias, final norms, head, pooler
    groups: dict[str, int]  # embeddings / attention / ffn / norms / head / pooler
    head_flops: int

    @property
    def total(self) -> int:
        return sum(self.groups.values())

    @property
    def active(self) -> int:
        unused = sum(layer.count * (layer.ffn - layer.ffn_active) for layer in self.layers)
        return self.total - unused

    @property
    def flops_ffn(self) -> int:
        return sum(layer.count * layer.flops.ffn for layer in self.layers)

    @property
    def flops_total(self) -> int:
        return sum(layer.count * layer.flops.total for layer in self.layers) + self.head_flops

    @property
    def flops_ffn_share(self) -> float:
        return self.flops_ffn / self.flops_total

    def memory_bytes(self) -> dict[str, int]:
        """Weights alone; a mixture of experts needs all experts in memory, not just top-k."""
        return {dtype: self.total * size for dtype, size in BYTES_PER_PARAM.items()}


def _ffn_rows(d: int, ffn: FfnSpec) -> tuple[Row, ...]:
    f = ffn.d_ff
    biases = ffn.bias
    if ffn.gated:
        rows = [Row("W (gate, activated)", f"{d} x {f}", d * f)]
        rows += [Row("b", f"{f}", f)] if biases else []
        rows += [Row("V (up, linear)", f"{d} x {f}", d * f)]
        rows += [Row("c", f"{f}", f)] if biases else []
    else:
        rows = [Row("W1", f"{d} x {f}", d * f)] + ([Row("b1", f"{f}", f)] if biases else [])
    rows += [Row("W2", f"{f} x {d}", f * d)] + ([Row("b2", f"{d}", d)] if biases else [])
    if ffn.is_moe:
        per_expert = expert_params(d, ffn)
        rows = [Row(f"expert: {r.name}", r.shape, r.params) for r in rows]
        rows.append(Row(f"x {ffn.experts} experts", f"{ffn.experts} x {per_expert:,}",
                        ffn.experts * per_expert))
        rows.append(Row("router", f"{d} x {ffn.experts}", router_params(d, ffn)))
    return tuple(rows)


def _attention_rows(d: int, att: AttentionSpec, prefix: str) -> tuple[Row, ...]:
    q_width, kv_width = attention_widths(d, att)
    return (
        Row(f"{prefix}W_Q", f"{d} x {q_width}", linear(d, q_width, att.qkv_bias)),
        Row(f"{prefix}W_K", f"{d} x {kv_width}", linear(d, kv_width, att.qkv_bias)),
        Row(f"{prefix}W_V", f"{d} x {kv_width}", linear(d, kv_width, att.qkv_bias)),
        Row(f"{prefix}W_O", f"{q_width} x {d}", linear(q_width, d, att.out_bias)),
    )


def _layer(spec: ModelSpec, kind: str, count: int, cross: bool) -> LayerCount:
    d, ffn, att, norm = spec.d_model, spec.ffn, spec.attention, spec.norm
    attention_rows: tuple[Row, ...] = ()
    proj_flops = score_flops = 0
    if att is not None:
        attention_rows = _attention_rows(d, att, "")
        proj_flops = attention_projection_flops(d, att)
        score_flops = attention_score_flops(d, att, spec.seq_len)
        if cross:
            attention_rows += _attention_rows(d, att, "cross ")
            proj_flops *= 2
            score_flops *= 2
    norms = (norm.per_layer + (1 if cross else 0)) * norm_params(d, norm) if norm else 0
    return LayerCount(
        kind=kind,
        count=count,
        ffn_rows=_ffn_rows(d, ffn),
        attention_rows=attention_rows,
        ffn=ffn_params(d, ffn),
        ffn_active=ffn_active_params(d, ffn),
        attention=sum(r.params for r in attention_rows),
        norm=norms,
        flops=Flops(ffn_flops(d, ffn), proj_flops, score_flops),
    )


def _embedding_rows(spec: ModelSpec) -> tuple[Row, ...]:
    emb, d = spec.embeddings, spec.d_model
    if emb is None:
        return ()
    dim = emb.dim or d
    rows = [Row("word embeddings", f"{emb.vocab} x {dim}", emb.vocab * dim)]
    if dim != d:
        rows += [Row("project in", f"{dim} x {d}", dim * d),
                 Row("project out", f"{d} x {dim}", d * dim)]
    if emb.positions:
        n = emb.positions + emb.position_offset
        rows.append(Row("position embeddings", f"{n} x {d}", n * d))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {d}", emb.token_types * d))
    return tuple(rows)


def count(spec: ModelSpec) -> ModelCount:
    """Every parameter of the spec, by layer kind and by group."""
    layers: list[LayerCount] = []
    stacks = 0
    if spec.ffn_only:
        layers.append(_layer(spec, "ffn", 1, cross=False))
    else:
        if spec.layers.encoder:
            layers.append(_layer(spec, "encoder", spec.layers.encoder, cross=False))
            stacks += 1
        if spec.layers.decoder:
            cross = spec.layers.encoder > 0
            layers.append(_layer(spec, "decoder", spec.layers.decoder, cross=cross))
            stacks += 1
    d, emb, norm, att = spec.d_model, spec.embeddings, spec.norm, spec.attention
    groups = {
        "embeddings": 0,
        "attention": sum(layer.count * layer.attention for layer in layers),
        "ffn": sum(layer.count * layer.ffn for layer in layers),
        "norms": sum(layer.count * layer.norm for layer in layers),
        "head": 0,
        "pooler": 0,
    }
    rows = list(_embedding_rows(spec))
    groups["embeddings"] = sum(r.params for r in rows)
    if emb is not None and emb.norm and norm is not None:
        rows.append(Row("embedding norm", f"{d}", norm_params(d, norm)))
        groups["norms"] += norm_params(d, norm)
    if att is not None and att.relative_buckets:
        table = att.relative_buckets * att.heads
        rows.append(Row("relative position bias", f"{stacks} x {att.relative_buckets} x "
                        f"{att.heads}", stacks * table))
        groups["attention"] += stacks * table
    if norm is not None and norm.final:
        rows.append(Row("final norm", f"{stacks} x {d}", stacks * norm_params(d, norm)))
        groups["norms"] += stacks * norm_params(d, norm)
    head_flops = 0
    if emb is not None and emb.head != "none":
        dim = emb.dim or d
        weight = emb.vocab * dim if emb.head == "untied" else 0
        bias = emb.vocab if emb.head_bias else 0
        label = "output head (tied to word embeddings)" if emb.head == "tied" else "output head"
        rows.append(Row(label, f"{dim} x {emb.vocab}", weight + bias))
        groups["head"] = weight + bias
        head_flops = 2 * dim * emb.vocab
    if spec.pooler:
        rows.append(Row("pooler", f"{d} x {d}", linear(d, d, True)))
        groups["pooler"] = linear(d, d, True)
    return ModelCount(spec, tuple(layers), tuple(rows), groups, head_flops)


# ---------------------------------------------------------------------------------------------
# A spec against a checkpoint's header, and the built-in presets at a glance.


@dataclass(frozen=True)
class ParamsResult:
    """``params``: the spec's count and, with ``--weights``, the file's count beside it."""

    count: ModelCount
    file: FileCount | None = None
    weights_path: str | None = None

    @property
    def mismatches(self) -> dict[str, tuple[int, int]]:
        """Groups whose spec and file counts differ: {group: (spec, file)}."""
        if self.file is None:
            return {}
        spec_groups = {**dict.fromkeys(GROUPS, 0), **self.count.groups}
        return {g: (spec_groups[g], self.file.groups[g]) for g in GROUPS
                if spec_groups[g] != self.file.groups[g]}

    @property
    def matches(self) -> bool:
        return not self.mismatches


@dataclass(frozen=True)
class PresetSummary:
    """One built-in preset in one line (the fields of ``presets --json``)."""

    name: str
    family: str
    d_model: int
    d_ff: int
    activation: str
    layers: int  # encoder + decoder layers; 0 for an FFN-only spec
    total_params: int
    active_params: int
    description: str


def summarize(spec: ModelSpec) -> PresetSummary:
    c = count(spec)
    return PresetSummary(
        name=spec.name, family=spec.family, d_model=spec.d_model, d_ff=spec.ffn.d_ff,
        activation=spec.ffn.label,
        layers=spec.layers.encoder + spec.layers.decoder if not spec.ffn_only else 0,
        total_params=c.total, active_params=c.active, description=spec.description)


def count_params(spec: ModelSpec, weights: Path | None = None) -> ParamsResult:
    """``params``: count the spec; with ``weights``, a .safetensors file, count its header
    too (no tensor data is read) for the comparison."""
    if weights is None:
        return ParamsResult(count(spec))
    from ffncli.checkpoint import count_file, read_header

    return ParamsResult(count(spec), count_file(read_header(weights)), str(weights))


def presets_summary() -> tuple[PresetSummary, ...]:
    """Every built-in preset, counted."""
    from ffncli.spec import load_preset, preset_names

    return tuple(summarize(load_preset(name)) for name in preset_names())
