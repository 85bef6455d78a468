"""Every parameter tensor of a spec, as a checkpoint of its family stores it: the inventory that
LoRA's adapters, the optimizers' states and 4-bit storage are counted over.

A matrix is (n_out, n_in) as ``nn.Linear`` keeps it, its bias a tensor of its own; a mixture
of experts keeps each expert's matrices apart (as its checkpoints do); a family that stores Q,
K and V as one matrix (GPT-2's ``c_attn``) or the gate and up projections as one (Phi-3) has
one tensor there. The sum over the inventory is :func:`ffncli.counting.model.count`'s total
(the tests check it for every preset and config). No NumPy here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ffncli.counting.parts import (
    attention_widths,
    latent_attention_matrices,
    norm_params,
    qk_norm_params,
)
from ffncli.specs.archs import fused
from ffncli.specs.sections import EmbeddingsSpec, NormSpec
from ffncli.specs.spec import ENCODER_PARTS, AttentionSpec, FfnSpec, ModelSpec

# What a linear layer answers to as a LoRA target: attention's q, k, v, o (qkv when stored as
# one matrix, kv for latent attention's shared key-value projections), the FFN's gate, up and
# down (gate_up when stored as one), a mixture of experts' router, and the other linear layers
# (a shared expert's gate, the pooler, embedding projections), which only all-linear adapts.
# The output head is never adapted (peft's all-linear leaves it out).
OTHER = "other"
HEAD = "head"


@dataclass(frozen=True)
class Tensor:
    """``count`` tensors of one shape: the layers of a kind times the experts of a layer."""

    part: str  # "attention", "ffn", "norms", "embeddings", "head", "pooler"
    shape: tuple[int, ...]  # (n_out, n_in) for a linear layer's weight
    count: int
    target: str = ""  # a linear layer's weight: its LoRA target (above); "" for any other
    kind: str = ""  # the layer kind it is in ("decoder", ...), "" outside the layers

    @property
    def numel(self) -> int:
        n = 1
        for size in self.shape:
            n *= size
        return n

    @property
    def linear(self) -> bool:
        return bool(self.target)


def _linear(part: str, target: str, n_in: int, n_out: int, bias: bool, count: int,
            kind: str = "") -> list[Tensor]:
    weight = Tensor(part, (n_out, n_in), count, target, kind)
    return [weight] + ([Tensor(part, (n_out,), count, "", kind)] if bias else [])


def _attention(spec: ModelSpec, att: AttentionSpec, n: int, kind: str) -> list[Tensor]:
    d = spec.d_model
    if att.kv_lora_rank:
        targets = {"W_Q": "q", "W_Q_a": "q", "W_Q_b": "q", "W_KV_a": "kv", "W_KV_b": "kv",
                   "W_O": "o"}
        return [t for name, n_in, n_out, bias in latent_attention_matrices(d, att)
                for t in _linear("attention", targets.get(name, ""), n_in, n_out, bias, n,
                                 kind)]  # "": a matrix no LoRA target names (an indexer's)
    q_width, kv_width = attention_widths(d, att)
    if "qkv" in fused(spec):
        qkv = _linear("attention", "qkv", d, q_width + 2 * kv_width, att.qkv_bias, n, kind)
    else:
        qkv = (_linear("attention", "q", d, q_width, att.qkv_bias, n, kind)
               + _linear("attention", "k", d, kv_width, att.qkv_bias, n, kind)
               + _linear("attention", "v", d, kv_width, att.qkv_bias, n, kind))
    return qkv + _linear("attention", "o", q_width, d, att.out_bias, n, kind)


def _qk_norms(spec: ModelSpec, att: AttentionSpec, n: int, kind: str) -> list[Tensor]:
    """Norms on queries and keys (or latent attention's two latents): their widths as
    :func:`qk_norm_params` counts them, a gain (and a bias) each."""
    total = qk_norm_params(spec.d_model, att)
    if not total:
        return []
    if att.kv_lora_rank:
        widths = [w for w in (att.kv_lora_rank, att.q_lora_rank) if w]
    elif att.qk_norm == "head":
        head_dim = att.head_dim or spec.d_model // att.heads
        widths = [head_dim, head_dim]
    else:
        widths = list(attention_widths(spec.d_model, att))
    per = 2 if att.qk_norm_bias and not att.kv_lora_rank else 1
    return [Tensor("norms", (w,), n * per, "", kind) for w in widths]


def _expert(d: int, ffn: FfnSpec, d_ff: int, n: int, gate_up: bool, kind: str) -> list[Tensor]:
    if ffn.gated and gate_up:
        up = _linear("ffn", "gate_up", d, 2 * d_ff, ffn.bias, n, kind)
    elif ffn.gated:
        up = (_linear("ffn", "gate", d, d_ff, ffn.bias, n, kind)
              + _linear("ffn", "up", d, d_ff, ffn.bias, n, kind))
    else:
        up = _linear("ffn", "up", d, d_ff, ffn.bias, n, kind)
    return up + _linear("ffn", "down", d_ff, d, ffn.bias, n, kind)


def _ffn(spec: ModelSpec, ffn: FfnSpec, n: int, kind: str) -> list[Tensor]:
    d, gate_up = spec.d_model, "gate_up" in fused(spec)
    tensors = _expert(d, ffn, ffn.d_ff, n * ffn.experts, gate_up, kind)
    if ffn.is_moe:
        tensors += _linear("ffn", "router", d, ffn.experts, ffn.router_bias, n, kind)
    if ffn.shared_d_ff:
        tensors += _expert(d, ffn, ffn.shared_d_ff, n, gate_up, kind)
    if ffn.shared_gate:
        tensors += _linear("ffn", OTHER, d, 1, False, n, kind)
    return tensors


def _layers(spec: ModelSpec, kind: str, n: int, cross: bool, ffn: FfnSpec) -> list[Tensor]:
    att, norm, d = spec.attention, spec.norm, spec.d_model
    tensors: list[Tensor] = []
    stacks = 2 if cross else 1
    if att is not None:
        for _ in range(stacks):
            tensors += _attention(spec, att, n, kind) + _qk_norms(spec, att, n, kind)
    if norm is not None and norm_params(d, norm):
        per = 2 if norm_params(d, norm) == 2 * d else 1
        tensors.append(Tensor("norms", (d,), n * (norm.per_layer + cross) * per, "", kind))
    return tensors + _ffn(spec, ffn, n, kind)


def _norm(name: str, width: int, norm: NormSpec | None, copies: int) -> list[Tensor]:
    """A norm of `width` (its weight, and bias if it has one) in `copies`, none if it has no
    parameters."""
    if norm is None or not norm_params(width, norm):
        return []
    per = 2 if norm_params(width, norm) == 2 * width else 1
    return [Tensor(name, (width,), per * copies)]


def _embeddings(spec: ModelSpec, emb: EmbeddingsSpec, stacks: int) -> list[Tensor]:
    """The embedding tables, their projections and norms, DeBERTa's relative table."""
    d, norm = spec.d_model, spec.norm
    dim = emb.dim or d
    tensors = [Tensor("embeddings", (emb.vocab, dim), 1)]
    wide = dim if emb.factorized else d  # ELECTRA: positions as wide as the word table
    copies = 2 if emb.per_stack and stacks == 2 else 1  # BART: each stack's own
    if emb.positions:
        tensors.append(Tensor("embeddings", (emb.positions + emb.position_offset, wide),
                              copies))
    if emb.token_types:
        tensors.append(Tensor("embeddings", (emb.token_types, wide), 1))
    if dim != d:
        tensors += _linear("embeddings", OTHER, dim, d, emb.factorized, 1)
        if not emb.factorized:
            tensors += _linear("embeddings", OTHER, d, dim, False, 1)
    if emb.norm:
        tensors += _norm("norms", wide, norm, copies)
    if emb.relative:  # DeBERTa's relative-position table, and its norm
        tensors.append(Tensor("embeddings", (emb.relative, d), 1))
        if emb.relative_norm:
            tensors += _norm("norms", d, norm, 1)
    return tensors


def _head(emb: EmbeddingsSpec, d: int) -> list[Tensor]:
    """The output head (when untied) and its bias."""
    tensors: list[Tensor] = []
    if emb.head == "none":
        return tensors
    if emb.head == "untied":
        tensors.append(Tensor("head", (emb.vocab, emb.dim or d), 1, HEAD))
    if emb.head_bias:
        tensors.append(Tensor("head", (emb.vocab,), 1))
    return tensors


def _outside(spec: ModelSpec, stacks: int) -> list[Tensor]:
    """Embeddings (and their projections and norm), relative position bias, final norms, the
    output head and the pooler."""
    emb, d, norm, att = spec.embeddings, spec.d_model, spec.norm, spec.attention
    tensors = _embeddings(spec, emb, stacks) if emb is not None else []
    if att is not None and att.relative_buckets:
        tables = spec.layers.encoder + spec.layers.decoder if att.relative_per_layer else stacks
        tensors.append(Tensor("attention", (att.relative_buckets, att.heads), tables))
    if norm is not None and norm.final:
        tensors += _norm("norms", d, norm, stacks)
    if emb is not None:
        tensors += _head(emb, d)
    if spec.pooler:
        tensors += _linear("pooler", OTHER, d, d, True, 1)
    return tensors


def tensors(spec: ModelSpec) -> tuple[Tensor, ...]:
    """Every parameter tensor of the spec (tied weights once), grouped by shape and place."""
    if spec.ffn_only:
        return tuple(_ffn(spec, spec.ffn, 1, "ffn"))
    found: list[Tensor] = []
    stacks = 0
    if spec.layers.encoder:
        found += _layers(spec, "encoder", spec.layers.encoder, False, spec.ffn)
        stacks += 1
    if spec.layers.decoder:
        cross, dense = spec.layers.encoder > 0, spec.layers.dense
        if dense and spec.dense_ffn is not None:
            found += _layers(spec, "dense decoder", dense, cross, spec.dense_ffn)
        if spec.layers.decoder > dense:
            found += _layers(spec, "decoder", spec.layers.decoder - dense, cross, spec.ffn)
        stacks += 1
    return tuple(found + _outside(spec, stacks))


def unitemised(spec: ModelSpec) -> tuple[str, ...]:
    """The parts of issue 40's encoders and seq2seq models (spec keys of ENCODER_PARTS at other
    than their defaults, encoder layer kinds, Perceiver's latents, MobileBERT's bottlenecks)
    that this inventory does not itemise yet: what depends on it refuses such a spec rather
    than count it wrongly."""
    sections = [("ffn", spec.ffn), ("attention", spec.attention), ("norm", spec.norm),
                ("layers", spec.layers), ("embeddings", spec.embeddings)]
    sections += [("attention", k.attention) for k in spec.pattern if k.attention is not None]
    found = {f"{label}.{f.name}" for label, section in sections if section is not None
             for f in fields(section)
             if f.name in ENCODER_PARTS and getattr(section, f.name) != f.default}
    found |= {name for name in ("encoder_pattern", "latents", "bottleneck", "loops",
                                "contact_head")
              if getattr(spec, name)}
    return tuple(sorted(found))
