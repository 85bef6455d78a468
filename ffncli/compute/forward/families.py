"""The model families the forward runs, each reading its checkpoint one layer at a time:
BERT-like encoders (BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA), GPT-2 and the LLaMA family
(LLaMA, Mistral, Qwen2, Qwen3, Gemma; GGUF files of the llama architecture) with its mixtures
of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE). Which
model type is which family, and its tensor names, is the architecture table's
(``ffncli.specs.table``). Each layer's FFN is the engine ``run`` builds, read through the
checkpoint the model holds open."""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ffncli.base.validate import Keys, brief
from ffncli.compute.build import build_model
from ffncli.compute.engine import Engine
from ffncli.compute.forward.layer import Attention, Block, Norm
from ffncli.compute.forward.ops import (
    Array,
    Rope,
    rope_frequencies,
)
from ffncli.compute.forward.transformer import Transformer
from ffncli.errors import ConfigError, InputError, SpecError, WeightsError
from ffncli.formats.safetensors import NoConfig, config_beside
from ffncli.formats.tensors import GgufTensors, Tensors, open_tensors
from ffncli.specs.layouts import (
    GEMMA_NORMS,
    GGUF_FIXED_KEYS,
    GGUF_PERMUTED,
    PADDED_POSITIONS,
    QWEN_SLIDING_WINDOW,
    SLIDING_WINDOW,
)
from ffncli.specs.spec import ModelSpec
from ffncli.specs.table import ARCHS, GGUF_ARCHITECTURES

# ---------------------------------------------------------------------------------------------
# Families.


class BertLike(Transformer):
    """BERT, RoBERTa, DistilBERT, ELECTRA: word + position (+ token type 0) embeddings and a
    LayerNorm, then post-norm layers with bidirectional attention; no final norm."""

    post_norm = True

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset()) -> None:
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks)
        kind = settings.text("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ConfigError(f"{settings.source}: key 'position_embedding_type': the forward "
                              f"computes absolute positions, got {brief(kind)}")
        self.eps = settings.number("layer_norm_eps", 1e-12)
        self.vocab = self._table_rows(self.names["word"])
        self.pad = self.offset = 0  # RoBERTa: positions start after the padding index
        if PADDED_POSITIONS in quirks:
            self.pad = settings.whole("pad_token_id", 1, minimum=0) or 0
            self.offset = self.pad + 1
        self.positions = self._position_table(self.names["position"])
        self.max_positions = self.positions.shape[0] - self.offset
        if self.max_positions < 1:  # RoBERTa: no row left after the padding index
            raise ConfigError(f"{settings.source}: key 'pad_token_id': positions start after "
                              f"it, so expected below {self.positions.shape[0] - 1} (the "
                              f"position table has {self.positions.shape[0]} rows), got "
                              f"{self.pad}")
        self.type0 = None
        if spec.embeddings is not None and spec.embeddings.token_types:
            self.type0 = self._need(self.names["type"], (spec.embeddings.token_types,
                                                         self._table_width()))[0]
        width = self._table_width()
        self.norm = Norm(self._need(self.names["norm"] + ".weight", (width,)),
                         self._need(self.names["norm"] + ".bias", (width,)), self.eps)

    def _rows_of_positions(self, ids: Array, positions: Array) -> Array:
        if not self.offset:
            return positions
        # RoBERTa numbers the non-padding tokens of a sequence from pad + 1; padding tokens
        # take the padding row (transformers' create_position_ids_from_input_ids)
        real = (ids != self.pad).astype(np.int64)
        count = np.cumsum(real)
        starts = np.flatnonzero(positions == 0)
        before = np.repeat(count[starts] - real[starts], np.diff(np.append(starts, ids.size)))
        return (count - before) * real + self.pad

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows(self.names["word"], ids, self.dtype)  # (n,) -> (n, d)
        h += self.positions[self._rows_of_positions(ids, positions)]
        if self.type0 is not None:
            h += self.type0
        return self.norm(h, h, self.scratch("norm_tmp", h.shape))

    def _attention_weights(self, i: int) -> tuple[Array, Array | None, Array, Array | None]:
        d, n = self.d_model, self.heads * self.head_dim
        qkv = self._fused([self._linear(self.names[p].format(i=i), n, d, True)
                           for p in ("q", "k", "v")])
        wo, bo = self._linear(self.names["o"].format(i=i), d, n, True)
        return qkv[0], qkv[1], wo.T, bo

    def layer(self, i: int) -> Block:
        self.check_layer(i)
        wqkv, bqkv, wo, bo = self._attention_weights(i)
        attention = Attention(wqkv, bqkv, wo, bo, self.heads, self.heads, self.head_dim,
                              1 / math.sqrt(self.head_dim), causal=False)
        d = self.d_model
        norms = [Norm(self._need(self.names[k].format(i=i) + ".weight", (d,)),
                      self._need(self.names[k].format(i=i) + ".bias", (d,)), self.eps)
                 for k in ("norm1", "norm2")]
        return Block(self._engine(i), attention, norms[0], norms[1], True, self.scratch)


class DistilBert(BertLike):
    """DistilBERT: BERT without token types, its LayerNorms' epsilon fixed at 1e-12."""

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset()) -> None:
        settings = Keys({**settings.data, "layer_norm_eps": 1e-12}, settings.source)
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks)


class Electra(BertLike):
    """ELECTRA: BERT's encoder behind embeddings embedding_size wide, projected to d_model."""

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset()) -> None:
        self._width = (spec.embeddings.dim if spec.embeddings is not None else None) \
            or spec.d_model
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks)
        self.project = self._linear("embeddings_project", spec.d_model, self._width, True) \
            if self._width != spec.d_model else None

    def _table_width(self) -> int:
        return self._width

    def embed(self, ids: Array, positions: Array) -> Array:
        h = super().embed(ids, positions)
        if self.project is None:
            return h
        w, b = self.project
        out = h @ w.T  # (n, embedding_size) -> (n, d_model)
        if b is not None:
            out += b
        return out


class Gpt2(Transformer):
    """GPT-2: word + learned position embeddings, pre-norm layers with causal attention (Conv1D
    weights, [in, out]), a final LayerNorm (ln_f)."""

    has_head = True

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset()) -> None:
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks)
        self.eps = settings.number("layer_norm_epsilon", 1e-5)
        self.scaled = settings.flag("scale_attn_weights", True)
        self.by_layer = settings.flag("scale_attn_by_inverse_layer_idx", False)
        self.vocab = self._table_rows(names["word"])
        self.positions = self._position_table(names["position"])
        self.max_positions = self.positions.shape[0]
        self.ln_f = self._layer_norm(names["norm"])

    def _layer_norm(self, stem: str) -> Norm:
        d = self.d_model
        return Norm(self._need(stem + ".weight", (d,)), self._need(stem + ".bias", (d,)), self.eps)

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows(self.names["word"], ids, self.dtype)  # (n,) -> (n, d)
        h += self.positions[positions]
        return h

    def layer(self, i: int) -> Block:
        self.check_layer(i)
        d = self.d_model
        qkv, o = self.names["qkv"].format(i=i), self.names["o"].format(i=i)
        wqkv = self._need(qkv + ".weight", (d, 3 * d))  # Conv1D: [in, out]
        bqkv = self._need(qkv + ".bias", (3 * d,))
        wo = self._need(o + ".weight", (d, d))
        bo = self._need(o + ".bias", (d,))
        scale = (1 / math.sqrt(self.head_dim) if self.scaled else 1.0) \
            / (i + 1 if self.by_layer else 1)
        attention = Attention(wqkv, bqkv, wo, bo, self.heads, self.heads, self.head_dim, scale,
                              causal=True)
        norms = [self._layer_norm(self.names[k].format(i=i)) for k in ("norm1", "norm2")]
        return Block(self._engine(i), attention, norms[0], norms[1], False, self.scratch)

    def final(self, h: Array) -> Array:
        return self.ln_f(h, np.empty_like(h), self.scratch("norm_tmp", h.shape))

    def final_tensors(self) -> tuple[str, ...]:
        return self.names["norm"] + ".weight", self.names["norm"] + ".bias"

    def final_gain(self) -> Array:
        return self.ln_f.weight

    def _head_choice(self) -> tuple[str, bool | None]:
        return self.names["word"], self._tied()  # GPT-2's head is its wte


def unpermute(w: Array, heads: int) -> Array:
    """Undo llama.cpp's converter, which reorders each head's Q and K rows so that rotated
    pairs are neighbours (x_0, x_{d/2}, x_1, ...): back to transformers' halves."""
    rest = w.shape[1:]
    return w.reshape(heads, -1, 2, *rest).swapaxes(1, 2).reshape(w.shape)


class LlamaLike(Transformer):
    """LLaMA and its relatives: token embeddings, pre-RMSNorm layers with rotary, causal,
    grouped-query attention (Mistral's sliding window, Qwen2's Q/K/V biases, Qwen3's per-head
    Q/K norms), a gated FFN or Mixtral's mixture of experts, a final RMSNorm. Gemma scales
    the embeddings by sqrt(d_model) and its norms by (1 + weight)."""

    default_theta = 10000.0
    default_eps = 1e-6
    has_head = True

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset(), permuted: bool = False) -> None:
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks)
        self.permuted = permuted  # GGUF: Q and K rows in llama.cpp's order
        self.gemma = GEMMA_NORMS in quirks
        self.eps = settings.number("rms_norm_eps", self.default_eps)
        self.vocab = self._table_rows(self.names["embed"])
        self.max_positions = spec.seq_len
        self.rope = self._rope()
        self.qk_norm = spec.attention is not None and spec.attention.qk_norm == "head"
        self.clip: float | None = None  # OLMoE's clip_qkv
        self.norm = self._norm(self.names["norm"])

    def _rope(self) -> Rope:
        """The rotation of every layer, whole heads unscaled (a family with YaRN or partial
        rotation builds ops.rotary)."""
        return Rope(rope_frequencies(self.settings, self.head_dim, self.default_theta))

    def _norm(self, name: str) -> Norm:
        w = self._need(name, (self.d_model,))
        return Norm(w + 1 if self.gemma else w, None, self.eps, rms=True)

    def window(self, i: int) -> int | None:
        """The layer's sliding window: Mistral's (and Mixtral's) when the config sets one;
        Qwen's only with use_sliding_window, on the layers layer_types (or max_window_layers)
        makes sliding."""
        s = self.settings
        if SLIDING_WINDOW in self.quirks:
            return s.whole("sliding_window", minimum=1)  # 0 would mask every key
        if QWEN_SLIDING_WINDOW in self.quirks and s.flag("use_sliding_window", False):
            types = s.data.get("layer_types")
            if isinstance(types, list) and i < len(types):
                sliding = types[i] == "sliding_attention"
            else:
                sliding = i >= (s.whole("max_window_layers", 28, minimum=0) or 0)
            return s.whole("sliding_window", 4096, minimum=1) if sliding else None
        return None

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows(self.names["embed"], ids, self.dtype)  # (n,) -> (n, d)
        if self.gemma:
            np.multiply(h, self.dtype.type(math.sqrt(self.d_model)), out=h)
        return h

    def layer(self, i: int) -> Block:
        self.check_layer(i)
        att = self.spec.attention
        assert att is not None  # checked in __init__
        d, hd, nq, nkv = self.d_model, self.head_dim, self.heads, self.kv_heads
        q, k, v = (self._linear(self.names[p].format(i=i), n * hd, d, att.qkv_bias)
                   for p, n in (("q", nq), ("k", nkv), ("v", nkv)))
        if self.permuted:
            q = (unpermute(q[0], nq), None if q[1] is None else unpermute(q[1], nq))
            k = (unpermute(k[0], nkv), None if k[1] is None else unpermute(k[1], nkv))
        wqkv, bqkv = self._fused([q, k, v])
        wo, bo = self._linear(self.names["o"].format(i=i), d, nq * hd, att.out_bias)
        attention = Attention(wqkv, bqkv, wo.T, bo, nq, nkv, hd, 1 / math.sqrt(hd),
                              causal=True, **self._kinds(i))
        norm1 = self._norm(self.names["attn_norm"].format(i=i))
        norm2 = self._norm(self.names["ffn_norm"].format(i=i))
        return Block(self._engine(i), attention, norm1, norm2, False, self.scratch)

    def _kinds(self, i: int) -> dict[str, Any]:
        """Layer i's attention's fields beyond the projections (:class:`Attention`'s kinds)."""
        q_norm, k_norm = self._qk_norms(i)
        return dict(window=self.window(i), rope=self.rope, q_norm=q_norm, k_norm=k_norm,
                    qk_eps=self.eps, clip=self.clip)

    def _qk_norms(self, i: int) -> tuple[Array | None, Array | None]:
        """Qwen3's norms of each query and key head (head_dim each), when it has them."""
        if not self.qk_norm:
            return None, None
        hd = self.head_dim
        return (self._need(self.names["q_norm"].format(i=i), (hd,)),
                self._need(self.names["k_norm"].format(i=i), (hd,)))

    def final(self, h: Array) -> Array:
        return self.norm(h, np.empty_like(h), self.scratch("norm_tmp", h.shape))

    def final_tensors(self) -> tuple[str, ...]:
        return (self.names["norm"],)

    def final_gain(self) -> Array:
        return self.norm.weight

    def _head_choice(self) -> tuple[str, bool | None]:
        if self.permuted:  # GGUF: output.weight, else the embeddings (as llama.cpp)
            return self.names["embed"], None
        return self.names["embed"], self._tied()


class Mixture(LlamaLike):
    """LLaMA's layers whose FFN is a mixture of experts, routed as the config says
    (:func:`ffncli.compute.build.routing_rule`): Qwen2-MoE (a shared expert behind a sigmoid
    gate), Qwen3-MoE (Qwen3's head norms); dense layers where the config makes them so."""

    def _engine(self, i: int) -> Engine:
        return build_model(self.spec, self.weights, i, self.dtype, tensors=self.tensors,
                           settings=self.settings).engine


class Mixtral(Mixture):
    default_theta = 1e6
    default_eps = 1e-5


class Olmoe(Mixture):
    """OLMoE: RMSNorms on the queries and on the keys over the whole projection (all heads at
    once), then Q, K and V clamped to [-clip_qkv, clip_qkv] when the config sets it."""

    default_eps = 1e-5

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset(), permuted: bool = False) -> None:
        super().__init__(spec, weights, tensors, settings, dtype, names, quirks, permuted)
        self.clip = None if settings.data.get("clip_qkv") is None else \
            settings.number("clip_qkv")

    def _qk_norms(self, i: int) -> tuple[Array | None, Array | None]:
        width = self.head_dim
        return (self._need(self.names["q_norm"].format(i=i), (self.heads * width,)),
                self._need(self.names["k_norm"].format(i=i), (self.kv_heads * width,)))


# The forward families the architecture table (ffncli.specs.table) names.
FAMILIES: dict[str, type[Transformer]] = {"bert": BertLike, "distilbert": DistilBert,
                                          "electra": Electra, "gpt2": Gpt2, "llama": LlamaLike,
                                          "mixtral": Mixtral, "moe": Mixture, "olmoe": Olmoe}
# gpt-oss and Llama 4 (ffncli.compute.forward.gpt_oss, .llama4) subclass Mixture in modules of
# their own, which add themselves here; the package imports them.


def _no_forward(source: str, what: str) -> SpecError:
    these = [t for t, row in ARCHS.items() if row.forward is not None]
    gguf = [row.gguf for row in ARCHS.values() if row.gguf and row.gguf_names is not None]
    return SpecError(f"{source}: {what} has no whole-model forward; these do: "
                     f"{', '.join(these)} (GGUF: {', '.join(gguf)})")


def open_transformer(spec: ModelSpec, weights: Path, dtype: np.dtype,
                     config: Path | None = None, *, tensors: Tensors | None = None,
                     settings: Keys | None = None) -> Transformer:
    """The model whose FFN ``spec`` describes, from the checkpoint at ``weights`` (a
    .safetensors file, an index, a model folder or a .gguf file). Its other settings come from
    ``config`` (else the config.json beside the weights) or the GGUF metadata. A caller that
    has the checkpoint open, and its config's keys, passes them (``tensors``, ``settings``):
    nothing is then read twice."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise InputError(f"the forward computes in float32 or float64, got {dtype}")
    if weights.suffix.lower() == ".npz":
        raise InputError(f"{weights}: an .npz holds one FFN; the whole-model forward reads a "
                         "checkpoint (.safetensors, an index, a model folder or .gguf)")
    if tensors is not None:
        return _open(spec, weights, dtype, config, tensors, settings)
    tensors = open_tensors(weights)
    try:
        return _open(spec, weights, dtype, config, tensors, settings)
    except BaseException:
        tensors.close()  # opened here: nothing else will close it
        raise


def _open(spec: ModelSpec, weights: Path, dtype: np.dtype, config: Path | None,
          tensors: Tensors, settings: Keys | None) -> Transformer:
    if isinstance(tensors, GgufTensors):
        return _open_gguf(spec, weights, dtype, tensors)
    if settings is None:
        config = config or config_beside(weights)
        if config is None:
            raise NoConfig(f"{weights}: the forward reads the model's config.json (norms, "
                           "positions, rotary settings); none beside the weights")
        settings = read_settings(config)
    model_type = settings.data.get("model_type")
    row = ARCHS.get(model_type) if isinstance(model_type, str) else None
    if row is None or row.forward is None or row.names is None:
        raise _no_forward(settings.source, f"model_type {brief(model_type)}")
    return family(row.forward)(spec, weights, tensors, settings, dtype, row.names, row.quirks)


def _open_gguf(spec: ModelSpec, weights: Path, dtype: np.dtype,
               tensors: GgufTensors) -> Transformer:
    header = tensors.header
    arch = header.architecture
    row = ARCHS.get(GGUF_ARCHITECTURES.get(arch, ""))
    if row is None or row.gguf_names is None:
        raise _no_forward(str(weights), f"GGUF architecture {brief(arch)}")
    meta = header.metadata

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    scaling = key("rope.scaling.type")
    if (scaling not in (None, "none", "linear")) or "rope_freqs.weight" in header.tensors:
        raise WeightsError(f"{weights}: GGUF rope scaling {brief(scaling or 'rope_freqs')} is "
                           "not computed; the forward knows none and linear")
    data: dict[str, Any] = {"model_type": arch, "rms_norm_eps": key(
        "attention.layer_norm_rms_epsilon"), "rope_theta": key("rope.freq_base"),
        "final_logit_softcapping": key("final_logit_softcapping"),
        "clip_qkv": key("attention.clamp_kqv"), **GGUF_FIXED_KEYS.get(arch, {})}
    if scaling == "linear":
        data["rope_scaling"] = {"rope_type": "linear", "factor": key("rope.scaling.factor")}
    settings = Keys(data, f"{weights} (GGUF metadata)")
    family = FAMILIES.get(row.forward or "", LlamaLike)
    assert issubclass(family, LlamaLike), row.forward  # the table gives GGUF names to these
    transformer = family(spec, weights, tensors, settings, dtype, row.gguf_names, row.quirks,
                         permuted=arch in GGUF_PERMUTED)
    rotated = key("rope.dimension_count")
    if rotated is not None and rotated != transformer.head_dim:
        raise WeightsError(f"{weights}: metadata key '{arch}.rope.dimension_count': the "
                           f"forward rotates whole heads of {transformer.head_dim}, got "
                           f"{brief(rotated)}")
    return transformer


def read_settings(path: Path) -> Keys:
    """A config.json, read by the reader of ``--config`` (hfconfig.read_config)."""
    from ffncli.specs.hfconfig import read_config

    data = read_config(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {brief(data)}")
    return Keys(data, str(path))


# Families in modules of their own, subclassing the ones above (DeepSeek-V2/V3 and GLM-4.5,
# gpt-oss, Llama 4): the table's forward name -> "module.Class" of this package, imported when
# a model of it is first opened, as the table's readers are (imported here, they would close a
# cycle).
ELSEWHERE = {"deepseek_v2": "deepseek.DeepseekV2", "deepseek_v3": "deepseek.DeepseekV3",
             "glm4_moe": "deepseek.Glm4Moe", "gpt_oss": "gpt_oss.GptOss",
             "llama4": "llama4.Llama4"}


def family(name: str) -> type[Transformer]:
    """The forward family the architecture table names ``name``."""
    if name in FAMILIES:
        return FAMILIES[name]
    module, cls = ELSEWHERE[name].rsplit(".", 1)
    found: type[Transformer] = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
    return found
