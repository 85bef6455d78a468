"""The KV cache: what decoding keeps per token (and per sequence: a mixer's fixed state), by
layer kind."""

from __future__ import annotations

from dataclasses import replace

from ffncli.base import record
from ffncli.counting.mixers import linear_state_elements
from ffncli.counting.parts import attention_of, attention_widths, value_widths
from ffncli.specs.spec import AttentionSpec, LayerKind, ModelSpec

# A KV cache element: 16-bit floats, or one byte for fp8 (e4m3/e5m2) and int8 caches.
KV_BYTES = {"float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}


@record
class KvPart:
    """The cache of the decoder layers of one kind, as transformers' cache holds it: each layer
    keeps ``per_token`` values for each of the last ``cap`` tokens (every token when cap is 0),
    plus ``state`` values per sequence whatever its length (a linear-attention or SSM state)."""

    kind: str  # full, sliding, chunked, mla (latent), linear, mamba, shared (none of its own)
    layers: int
    per_token: int
    cap: int = 0
    state: int = 0
    # which cache layers (0-based; empty for every layer): the decoder layers, or each attention
    # sublayer where a layer has several (LongCat-Flash: layer i's are 2i and 2i + 1)
    indices: tuple[int, ...] = ()
    # cache layers per decoder layer: each run of a looped layer's weights keeps one (Dory's
    # recurrent loops, HRM-Text's cycles: LayerKind.runs); ``layers`` counts cache layers
    runs: int = 1
    # DeepSeek-V4's compressed KV (a CompressorSpec beside attention): an entry of
    # ``entry`` values every ``rate`` tokens; each token of the window not yet closed keeps
    # ``pending`` values (its kv and gate), and once a window has closed, overlapping windows
    # keep ``overlap`` values (the last window's half that the next entry pools)
    rate: int = 0
    entry: int = 0
    pending: int = 0
    overlap: int = 0

    def compressed(self, seq_len: int) -> int:
        """One layer's compressed values at seq_len tokens (0 without a compressor)."""
        if not self.rate:
            return 0
        closed, left = divmod(seq_len, self.rate)
        return closed * self.entry + left * self.pending + (self.overlap if closed else 0)

    def elements(self, seq_len: int) -> int:
        """Values held for one sequence of seq_len tokens, all layers of this kind."""
        tokens = min(seq_len, self.cap) if self.cap else seq_len
        return self.layers * (self.per_token * tokens + self.state + self.compressed(seq_len))

    def peak(self, seq_len: int) -> int:
        """The most values held on the way to seq_len tokens: elements, but a compressor drops
        its pending tokens when their window closes, so its most may lie at the end of the last
        closed window."""
        closed = seq_len // self.rate if self.rate else 0
        before = self.elements(closed * self.rate - 1) if closed else 0
        return max(self.elements(seq_len), before)


@record
class KvCache:
    """The KV cache of a whole model at seq_len x batch tokens, by layer kind (``parts``)."""

    kind: str  # "mha", "gqa", "mqa", "mla" (latent), "state" (no attention), "none"
    layers: int  # decoder layers holding a cache (cross-attention counted as more layers)
    elements_per_token: int  # cached numbers per token, all layers, below every window
    seq_len: int
    batch: int
    parts: tuple[KvPart, ...] = ()  # per layer kind

    def elements(self, seq_len: int) -> int:
        """Values held for one sequence of seq_len tokens, all layers."""
        return sum(p.elements(seq_len) for p in self.parts)

    def peak(self, seq_len: int) -> int:
        """At most the values held for one sequence on the way to seq_len tokens (each part's
        most, summed): elements, where the cache never shrinks."""
        return sum(p.peak(seq_len) for p in self.parts)

    @property
    def grows(self) -> bool:
        """Whether the cache still grows at seq_len (not every layer capped or a state)."""
        return self.elements(self.seq_len + 1) > self.elements(self.seq_len)

    def bytes_per_token(self) -> dict[str, int]:
        return {dtype: self.elements_per_token * size for dtype, size in KV_BYTES.items()}

    def bytes(self) -> dict[str, int]:
        """At seq_len tokens for each of batch sequences."""
        n = self.elements(self.seq_len) * self.batch
        return {dtype: n * size for dtype, size in KV_BYTES.items()}


def kv_elements_per_layer(d_model: int, att: AttentionSpec) -> int:
    """One token's cache in one layer: K and V of each kv head, or under latent attention the
    compressed latent and the shared rope key (what transformers 5 caches for DeepSeek-V3), and
    the indexer's key (DeepSeek-V3.2's DynamicIndexedLayer)."""
    if att.kv_lora_rank:
        return att.kv_lora_rank + att.rope_head_dim + att.index_head_dim
    _, kv_width = attention_widths(d_model, att)
    return kv_width + value_widths(d_model, att)[0] + att.qsa_head_dim  # QSA's raw key


# DeepSeek-V4
def pooling_cache(rate: int, width: int, series: int) -> dict[str, int]:
    """One DeepSeek-V4 compressor's cache (DeepseekV4HCACache, DeepseekV4CSACache): an entry of
    width every rate tokens; a pending token's kv and gate (series x width each); with
    overlapping windows (series 2) the last closed window's first half, kv and gate (2 x rate
    x width)."""
    return {"entry": width, "pending": 2 * series * width,
            "overlap": 2 * rate * width if series > 1 else 0}


def compressor_cache(kind: LayerKind) -> dict[str, int]:
    """KvPart's compressed fields of a layer with a compressor beside its attention: its
    pooling's and its indexer's (compressed sparse attention), summed; none without one."""
    mix = kind.mixer_spec
    if mix is None:  # no mixer beside attention: specs/layers.py stays unloaded
        return {}
    from ffncli.specs.layers import CompressorSpec  # loaded: the spec holds a mixer

    if not isinstance(mix, CompressorSpec):
        return {}
    parts = [pooling_cache(mix.rate, mix.head_dim, mix.series)]
    if mix.index_heads:
        parts.append(pooling_cache(mix.rate, mix.index_head_dim, mix.series))
    return {"rate": mix.rate, **{k: sum(p[k] for p in parts) for k in parts[0]}}


def _beside_attention_state(kind: LayerKind) -> int:
    """The fixed state of a mixer that runs beside a layer's attention (Falcon-H1's Mamba-2,
    a mixer_spec on an attention layer): kept with that layer's K and V."""
    return linear_state_elements(kind.mixer_spec) if kind.mixer_spec is not None else 0


def _prompt_state(att: AttentionSpec, per_token: int) -> int:
    """The learned prompt tokens a layer's cache holds before the sequence's (CPM-Ant): a
    fixed part of its cache, whatever the length."""
    return att.prompt_tokens * per_token


def _kv_part(spec: ModelSpec, kind: LayerKind, indices: tuple[int, ...]) -> KvPart | None:
    """A kind of layer's cache: sliding and chunked layers keep the last window - 1 tokens
    (transformers' DynamicSlidingWindowLayer), a layer reading another's KV keeps none."""
    n = len(indices)
    if kind.shares_kv:
        return KvPart("shared", n, 0, indices=indices)
    if kind.mixer in ("linear", "mamba", "conv") and kind.mixer_spec is not None:
        shared = kind.attention if kind.shared is not None else None  # Zamba's shared block
        return KvPart(kind.mixer, n, kv_elements_per_layer(spec.d_model, shared) if shared
                      else 0, state=linear_state_elements(kind.mixer_spec), indices=indices)
    att = attention_of(spec, kind)
    if att is None:
        return None
    per_token = kv_elements_per_layer(spec.d_model, att)
    state = _beside_attention_state(kind) + _prompt_state(att, per_token)
    if kind.attentions > 1:  # a cache layer per attention sublayer, as transformers numbers them
        a = kind.attentions
        indices, n = tuple(i * a + j for i in indices for j in range(a)), n * a
    more = compressor_cache(kind)
    if kind.mixer in ("sliding", "chunked"):
        return KvPart(kind.mixer, n, per_token, cap=max(kind.window - 1, 1), state=state,
                      indices=indices, **more)
    return KvPart("mla" if att.kv_lora_rank else "full", n, per_token, state=state,
                  indices=indices, **more)


def kv_cache(spec: ModelSpec, seq_len: int, batch: int = 1) -> KvCache:
    """The KV cache of decoding seq_len tokens in each of batch sequences, per layer kind.
    Encoder-only models keep none; an encoder-decoder's decoder also caches cross-attention K
    and V, counted here for a source as long as seq_len."""
    att = spec.attention
    if spec.layers.decoder == 0 or (att is None and not spec.pattern):
        return KvCache("none", 0, 0, seq_len, batch)
    if spec.layers.encoder and att is not None:
        layers = spec.layers.decoder * 2
        parts: tuple[KvPart, ...] = (KvPart("full", layers,
                                            kv_elements_per_layer(spec.d_model, att)),)
    else:
        parts = _decoder_parts(spec)
    held = sum(p.layers for p in parts if p.per_token or p.state)
    return KvCache(_cache_kind(att), held, sum(p.layers * p.per_token for p in parts), seq_len,
                   batch, parts)


def _cache_kind(att: AttentionSpec | None) -> str:
    """KvCache.kind of a model of this attention (None: a state alone)."""
    if att is None:
        return "state"
    kv_heads = att.kv_heads or att.heads
    return ("mla" if att.kv_lora_rank else "mha" if kv_heads == att.heads
            else "mqa" if kv_heads == 1 else "gqa")


def _decoder_parts(spec: ModelSpec) -> tuple[KvPart, ...]:
    """The cache of a decoder's layers, a part per kind that keeps one, in order of first
    appearance."""
    at: dict[LayerKind, list[int]] = {}
    for i, k in enumerate(spec.decoder_kinds()):
        at.setdefault(k, []).extend(cache_layers(spec, i))
    return tuple(_looped(p, spec) for k, ix in at.items()
                 if (p := _kv_part(spec, k, tuple(sorted(ix)))) is not None)


def cache_layers(spec: ModelSpec, i: int) -> tuple[int, ...]:
    """The cache layers of decoder layer i: one per run of its weights, as transformers
    numbers them (ModelSpec.loops: Dory's recurrent loops, HRM-Text's cycles), else its own."""
    return spec.loops.cache_layers[i] if spec.loops is not None else (i,)


def _looped(part: KvPart, spec: ModelSpec) -> KvPart:
    """A part of looped layers says how many cache layers each of its layers keeps."""
    if spec.loops is None:
        return part
    held = set(part.indices)
    weights = sum(1 for slots in spec.loops.cache_layers if slots and slots[0] in held)
    return replace(part, runs=part.layers // weights) if weights else part

