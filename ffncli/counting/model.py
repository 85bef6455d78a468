"""Parameters, FLOPs and weight memory of a spec: each kind of layer counted from its parts
(counting/parts.py, mixers.py, rows.py, flops.py), and the model's own rows (embeddings.py).

Counting follows the reference implementations (Hugging Face classes, the 2017 paper): tied
weights are counted once, buffers never. FLOPs are 2 per multiply-add of the matrix products
(biases, activations, norms and softmax are left out, as in Kaplan et al. 2020).
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.base import record
from ffncli.counting.embeddings import (
    bottleneck_model_rows,
    embedding_rows,
    model_extra_rows,
    stack_copies,
)
from ffncli.counting.flops import (
    Flops,
    attention_projection_flops,
    attention_score_flops,
    ffn_flops,
)
from ffncli.counting.mixers import beside_prefix, depth_rows, mixer_rows
from ffncli.counting.parts import (
    Row,
    attention_of,
    attention_widths,
    contact_head_row,
    cross_attention,
    expert_norm_params,
    ffn_active_min_params,
    ffn_active_params,
    ffn_params,
    input_affine_params,
    k_norm_params,
    linear,
    norm_params,
    qk_norm_params,
    residual_affine_params,
    residual_scale_params,
    router_norm_params,
    sub_norm_params,
    unused_head_experts_params,
)
from ffncli.counting.rows import (
    attention_block_rows,
    bottleneck_layer_rows,
    ffn_block_rows,
    head_scale_row,
    latent_rows,
    layer_extra_rows,
    norm_gate_rows,
    shared_block_rows,
    stream_head_rows,
    stream_rows,
)
from ffncli.specs.spec import AttentionSpec, FfnSpec, LayerKind, ModelSpec

BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "int8": 1}


BITS_PER_PARAM = {"float32": 32, "bfloat16": 16, "int8": 8, "int4": 4}


@record
class LayerCount:
    """The parameters of the layers of one kind, each layer's: its FFN's and attention's rows."""

    kind: str  # "encoder", "decoder", or "ffn" for an FFN-only spec
    count: int
    ffn_rows: tuple[Row, ...]
    attention_rows: tuple[Row, ...]
    ffn: int
    ffn_active: int
    attention: int  # self-attention, plus cross-attention in an encoder-decoder's decoder
    norm: int
    flops: Flops
    indices: tuple[int, ...] = ()  # which decoder layers are of this kind (0-based)
    ffn_active_least: int | None = None  # zero experts: the fewest a token uses (None: ffn_active)
    ffn_spec: FfnSpec | None = None  # the FFN of these layers
    mixer: str = "full"  # the token mixer (spec.MIXERS); window: its window or chunk
    window: int = 0
    other_rows: tuple[Row, ...] = ()  # parts neither attention, FFN nor norm (Gemma 3n)
    other: int = 0
    repeats: int = 1  # times each of these layers runs per token (ALBERT's shared layers)
    norm_unused: int = 0  # norms of the experts a token does not use (Ergo's expert norms)
    attention_unused: int = 0  # attention banks a token does not use (JetMoE's MoA)

    @property
    def total(self) -> int:
        return self.ffn + self.attention + self.norm + self.other

    @property
    def active(self) -> int:
        return self.ffn_active + self.attention - self.attention_unused + self.norm \
            - self.norm_unused + self.other

    @property
    def ffn_share(self) -> float:
        return self.ffn / self.total if self.total else 0.0

    @property
    def ffn_active_share(self) -> float:
        return self.ffn_active / self.active if self.active else 0.0


@record
class ActiveRange:
    """Active parameters per token as a range: ``least`` when a token's choices fall on as
    many zero experts as they can, ``most`` (ModelCount.active) when on none; ``why``."""

    least: int
    most: int
    why: str


@record
class ModelCount:
    """A spec's count: its layers' kinds, the rows outside the layers and the totals by group."""

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
        unused = sum(layer.count * (layer.total - layer.active) for layer in self.layers)
        return self.total - unused

    @property
    def active_range(self) -> ActiveRange | None:
        """The parameters a token uses when that is not one number (zero experts can take some
        of its top-k choices: LongCat-Flash); the most is ``active``. None otherwise."""
        zero = [layer for layer in self.layers if layer.ffn_active_least is not None]
        fewer = sum(layer.count * (layer.ffn_active - (layer.ffn_active_least or 0))
                    for layer in zero)
        if not fewer:
            return None
        ffn = zero[0].ffn_spec
        assert ffn is not None  # _layer sets it beside ffn_active_least
        k, z = ffn.top_k, ffn.zero_experts
        why = (f"up to {min(k, z)} of a token's top-{k} expert choices can fall on one of {z} "
               "zero (identity) experts, which use no parameters" if z > 1 else
               f"a token's top-{k} expert choice can fall on the skip (zero) expert, which "
               "uses no parameters" if k == 1 else
               f"up to 1 of a token's top-{k} expert choices can fall on the skip (zero) "
               "expert, which uses no parameters")
        return ActiveRange(self.active - fewer, self.active, why)

    def decoder_ffn(self) -> tuple[int, ...]:
        """Each decoder layer's FFN parameters, in order (experts, shared experts and router
        included)."""
        at = {i: layer.ffn for layer in self.layers for i in layer.indices}
        return tuple(at[i] for i in sorted(at))

    @property
    def flops_ffn(self) -> int:
        return sum(layer.count * layer.repeats * layer.flops.ffn for layer in self.layers)

    @property
    def flops_total(self) -> int:
        return sum(layer.count * layer.repeats * layer.flops.total
                   for layer in self.layers) + self.head_flops

    @property
    def flops_ffn_share(self) -> float:
        return self.flops_ffn / self.flops_total

    def memory_bytes(self) -> dict[str, int]:
        """Weights alone; a mixture of experts needs all experts in memory, not just top-k."""
        return {dtype: self.total * size for dtype, size in BYTES_PER_PARAM.items()}

    def weight_bytes(self) -> dict[str, int]:
        """memory_bytes and int4, two parameters a byte (the scales and zero points of real
        4-bit formats are not included)."""
        return {dtype: (self.total * bits + 7) // 8 for dtype, bits in BITS_PER_PARAM.items()}


_PLAIN = LayerKind()  # a layer of the spec's attention and FFN


def _layer(spec: ModelSpec, name: str, count: int, cross: bool,
           kind: LayerKind = _PLAIN, indices: tuple[int, ...] = ()) -> LayerCount:
    """count layers of one kind (the decoder's layers at indices): its mixing, FFN, norms and
    other parts, and a shared block it runs."""
    d, att = spec.d_model, attention_of(spec, kind)
    ffn = kind.ffn or spec.ffn
    attention_rows, proj_flops, score_flops = _mixing(spec, kind, att, cross)
    norms, experts_norms, used_norms = _layer_norms(spec, kind, att, cross)
    extra = _layer_other_rows(spec, kind, att)
    has_ffn = kind.has_ffn
    layer = LayerCount(
        kind=name,
        count=count,
        ffn_rows=ffn_block_rows(d, ffn) if has_ffn else (),
        attention_rows=attention_rows,
        ffn=ffn_params(d, ffn) if has_ffn else 0,
        ffn_active=ffn_active_params(d, ffn) if has_ffn else 0,
        attention=sum(r.params for r in attention_rows),
        norm=norms,
        other_rows=extra,
        other=sum(r.params for r in extra),
        flops=Flops(ffn_flops(d, ffn) if has_ffn else 0, proj_flops, score_flops),
        indices=indices,
        mixer=kind.mixer,
        window=kind.window,
        ffn_active_least=ffn_active_min_params(d, ffn) if has_ffn and ffn.zero_experts
        else None,
        ffn_spec=ffn,
        norm_unused=experts_norms - used_norms,
        attention_unused=unused_head_experts_params(d, att) if att is not None else 0,
    )
    return layer if kind.shared is None else _with_shared_block(spec, kind, layer)


def _mixing(spec: ModelSpec, kind: LayerKind, att: AttentionSpec | None, cross: bool
            ) -> tuple[tuple[Row, ...], int, int]:
    """A layer's token mixing: (its rows, its projections' FLOPs, its scores' FLOPs), of its
    other mixer alone or of its softmax attention (and a mixer beside it, and cross-attention,
    times its attention sublayers)."""
    d = spec.d_model
    if att is None:
        rows = mixer_rows(d, kind)
        return rows, 2 * sum(r.params for r in rows), 0
    beside = mixer_rows(d, kind, beside_prefix(kind.mixer_spec)) \
        if kind.mixer_spec is not None else ()  # a mixer beside attention (Falcon-H1)
    attention_rows = attention_block_rows(d, att, "")
    if kind.shares_kv:  # no K and V of its own (Gemma 3n's last layers)
        attention_rows = tuple(r for r in attention_rows if r.name not in ("W_K", "W_V"))
    attention_rows += beside
    proj_flops = attention_projection_flops(d, att) + 2 * sum(r.params for r in beside)
    window = kind.window if kind.mixer in ("sliding", "chunked") else 0
    score_flops = attention_score_flops(d, att, min(spec.seq_len, window or spec.seq_len))
    if cross:
        attention_rows += attention_block_rows(d, cross_attention(att), "cross ")
        proj_flops *= 2
        score_flops *= 2
    attention_rows = _sublayers(attention_rows, kind.attentions)
    return attention_rows, proj_flops * kind.attentions, score_flops * kind.attentions


def _layer_norms(spec: ModelSpec, kind: LayerKind, att: AttentionSpec | None, cross: bool
                 ) -> tuple[int, int, int]:
    """(a layer's norm parameters, its experts' norms among them, those one token uses)."""
    d, norm, ffn = spec.d_model, spec.norm, kind.ffn or spec.ffn
    per_layer = (kind.norms if kind.norms is not None else norm.per_layer) if norm else 0
    norms = (per_layer + (norm.cross if cross else 0)) * norm_params(d, norm) if norm else 0
    norms += sub_norm_params(d, ffn, norm) + residual_scale_params(d, norm) if norm else 0
    norms += residual_affine_params(d, norm) if norm else 0  # ZAYA's
    norms += router_norm_params(ffn) if kind.has_ffn else 0  # ZAYA's router MLP's norm
    if att is not None:
        qk = qk_norm_params(d, att)
        norms += ((qk - k_norm_params(d, att) if kind.shares_kv else qk) * (2 if cross else 1)
                  * kind.attentions)
    experts_norms, used_norms = expert_norm_params(d, ffn) if kind.has_ffn else (0, 0)
    return norms + experts_norms, experts_norms, used_norms


def _layer_other_rows(spec: ModelSpec, kind: LayerKind, att: AttentionSpec | None
                      ) -> tuple[Row, ...]:
    """A layer's parts neither attention, FFN nor norm: Gemma 3n's, A.X-K2's norm gates,
    hyper-connections, MobileBERT's bottlenecks."""
    d, norm = spec.d_model, spec.norm
    extra = (layer_extra_rows(d, spec.extras) if spec.extras else ()) + norm_gate_rows(d, kind) \
        + stream_rows(d, spec) + depth_rows(d, kind)
    if spec.bottleneck is not None and norm is not None:
        extra += bottleneck_layer_rows(d, spec.bottleneck, norm, att)
    return extra


def _with_shared_block(spec: ModelSpec, kind: LayerKind, layer: LayerCount) -> LayerCount:
    """A layer that also runs the shared block (kind.shared): its own d x d projection, and
    where it holds the block, the block's attention, FFN and two norms (elsewhere its FFN
    counts 0). Every layer using the block does its FLOPs."""
    blk, att, ffn, d = kind.shared, kind.attention, kind.ffn or spec.ffn, spec.d_model
    assert blk is not None and att is not None  # the readers give a shared block its attention
    attention, ffn_rows = shared_block_rows(d, att, ffn, blk)
    own = (Row("W_in (its own)", f"{d} x {d}", d * d),)
    held = blk.owner
    norms = norm_params(blk.input_width, spec.norm) + norm_params(d, spec.norm) \
        if held and spec.norm else 0
    ffn_params = sum(r.params for r in ffn_rows)
    w, r = blk.input_width, blk.adapter_rank  # a token goes through its layer's adapters alone
    q, kv = attention_widths(d, att)
    up = 2 * ffn.d_ff if ffn.gated else ffn.d_ff
    flops = Flops(ffn_flops(d, ffn) + 2 * (d * r + r * up),
                  layer.flops.attention_projections + 2 * (w * (q + 2 * kv) + q * d + d * d
                                                           + blk.attention_adapters * 6 * w * r),
                  layer.flops.attention_scores + attention_score_flops(d, att, spec.seq_len))
    attention_rows = layer.attention_rows + own + (attention if held else ())
    return replace(layer, attention_rows=attention_rows,
                   attention=sum(r.params for r in attention_rows),
                   ffn_rows=ffn_rows if held else (), ffn=ffn_params if held else 0,
                   ffn_active=ffn_params if held else 0, norm=layer.norm + norms, flops=flops)


def _sublayers(rows: tuple[Row, ...], n: int) -> tuple[Row, ...]:
    """The rows of n attention sublayers of one layer (LongCat-Flash: 2), numbered."""
    if n == 1:
        return rows
    return tuple(Row(f"{i + 1}: {r.name}", r.shape, r.params) for i in range(n) for r in rows)


def _decoder_layers(spec: ModelSpec, cross: bool) -> list[LayerCount]:
    """The decoder's layers, those of one kind counted together, kinds in order of first
    appearance (DeepSeek's dense first layers, then its MoE layers)."""
    at: dict[LayerKind, list[int]] = {}
    for i, kind in enumerate(spec.decoder_kinds()):
        at.setdefault(kind, []).append(i)
    return [replace(_layer(spec, kind.name, len(ix), cross, kind, tuple(ix)), repeats=kind.runs)
            for kind, ix in at.items()]


def _encoder_layers(spec: ModelSpec) -> list[LayerCount]:
    """The encoder's layers: by kind when encoder_pattern gives them (Switch Transformers'
    sparse layers), else all alike; ALBERT's layers.shared distinct layers counted once each,
    each run layers.encoder / layers.shared times."""
    if spec.encoder_pattern:
        at: dict[LayerKind, int] = {}
        for kind in spec.encoder_pattern:
            at[kind] = at.get(kind, 0) + 1
        return [_layer(spec, kind.name, n, False, kind) for kind, n in at.items()]
    distinct = spec.layers.shared or spec.layers.encoder
    shared = distinct < spec.layers.encoder
    layer = _layer(spec, "shared encoder" if shared else "encoder", distinct, cross=False)
    return [replace(layer, repeats=spec.layers.encoder // distinct)]


def count(spec: ModelSpec) -> ModelCount:
    """Every parameter of the spec, by layer kind and by group."""
    layers, stacks = _all_layers(spec)
    groups = {
        "embeddings": 0,
        "attention": sum(layer.count * layer.attention for layer in layers),
        "ffn": sum(layer.count * layer.ffn for layer in layers),
        "norms": sum(layer.count * layer.norm for layer in layers),
        "head": 0,
        "pooler": 0,
    }
    rows = list(embedding_rows(spec))
    groups["embeddings"] = sum(r.params for r in rows)
    _embedding_norms(spec, rows, groups)
    _relative_bias(spec, stacks, rows, groups)
    _final_norm(spec, stacks, rows, groups)
    head_flops = _head(spec, rows, groups)
    d = spec.d_model
    if spec.pooler:
        rows.append(Row("pooler", f"{d} x {d}", linear(d, d, True)))
        groups["pooler"] = linear(d, d, True)
    _added_parts(spec, layers, rows, groups)
    _loop_states(spec, rows, groups)
    if spec.contact_head and spec.attention is not None:
        rows.append(contact_head_row(spec.layers.encoder, spec.attention.heads))
        groups["other"] = groups.get("other", 0) + rows[-1].params
    return ModelCount(spec, tuple(layers), tuple(rows), groups, head_flops)


def _all_layers(spec: ModelSpec) -> tuple[list[LayerCount], int]:
    """(the layers of every kind, the stacks: 0 for an FFN alone, 1, or 2 for an
    encoder-decoder)."""
    if spec.ffn_only:
        return [_layer(spec, "ffn", 1, cross=False)], 0
    layers: list[LayerCount] = []
    stacks = 0
    if spec.layers.encoder:
        layers += _encoder_layers(spec)
        stacks += 1
    if spec.layers.decoder:
        cross = spec.layers.encoder > 0 or spec.layers.cross
        layers += _decoder_layers(spec, cross=cross and not spec.layers.merged_cross)
        stacks += 1
    return layers, stacks


def _embedding_norms(spec: ModelSpec, rows: list[Row], groups: dict[str, int]) -> None:
    """The embeddings' norms (and the decoder's own, the entities', the relative table's),
    added to rows and to the norms group."""
    d, emb, norm = spec.d_model, spec.embeddings, spec.norm
    if emb is None or norm is None:
        return
    added: list[Row] = []
    if emb.norm:
        width = (emb.dim or d) if emb.factorized else d
        added.append(Row("embedding norm", f"{width}", norm_params(width, norm)))
        if stack_copies(spec) > 1:
            added.append(Row("decoder embedding norm", f"{width}", norm_params(width, norm)))
    if emb.entities:
        added.append(Row("entity embedding norm", f"{d}", norm_params(d, norm)))
    if emb.relative and emb.relative_norm:
        added.append(Row("relative embedding norm", f"{d}", norm_params(d, norm)))
    if norm.residual_affine:  # ZAYA
        added.append(Row("input scale and bias", f"2 x {d}", input_affine_params(d, norm)))
    rows += added
    groups["norms"] += sum(r.params for r in added)


def _relative_bias(spec: ModelSpec, stacks: int, rows: list[Row], groups: dict[str, int]
                   ) -> None:
    """T5's relative position bias: a table a stack, or a table a layer (relative_per_layer)."""
    att = spec.attention
    if att is None or not att.relative_buckets:
        return
    table = att.relative_buckets * att.heads
    tables = spec.layers.encoder + spec.layers.decoder if att.relative_per_layer else stacks
    rows.append(Row("relative position bias", f"{tables} x {att.relative_buckets} x "
                    f"{att.heads}", tables * table))
    groups["attention"] += tables * table


def _final_norm(spec: ModelSpec, stacks: int, rows: list[Row], groups: dict[str, int]) -> None:
    """The norm after the last layer, one a stack."""
    norm, d = spec.norm, spec.d_model
    if norm is None or not norm.final:
        return
    final = norm if norm.final_bias is None else replace(norm, bias=norm.final_bias)
    width = norm.final_width or d
    rows.append(Row("final norm", f"{stacks} x {width}", stacks * norm_params(width, final)))
    groups["norms"] += stacks * norm_params(width, final)


def _head(spec: ModelSpec, rows: list[Row], groups: dict[str, int]) -> int:
    """The output head (and its transform), added to rows and groups; its FLOPs a token."""
    d, emb, norm = spec.d_model, spec.embeddings, spec.norm
    if emb is None or emb.head == "none":
        return 0
    dim, vocab = emb.dim or d, emb.decoder_vocab or emb.head_vocab or emb.vocab
    heads = emb.codebooks or 1  # MusicGen: a head a codebook
    weight = heads * vocab * dim if emb.head == "untied" else 0
    bias = heads * vocab if emb.head_bias else 0
    label = "output head (tied to word embeddings)" if emb.head == "tied" else \
        "output heads, one a codebook" if emb.codebooks else "output head"
    shape = f"{heads} x {dim} x {vocab}" if emb.codebooks else f"{dim} x {vocab}"
    rows.append(Row(label, shape, weight + bias))
    groups["head"] = weight + bias
    if emb.head_scale:
        rows.append(head_scale_row(vocab))
        groups["head"] += vocab
    if emb.head_transform and norm is not None:
        transform = linear(d, d, emb.head_transform_bias) + norm_params(d, norm)
        rows.append(Row("head transform (dense and norm)", f"{d} x {d}, {d}", transform))
        groups["head"] += transform
    head_flops = 2 * dim * vocab * heads
    return head_flops


def _added_parts(spec: ModelSpec, layers: list[LayerCount], rows: list[Row],
                 groups: dict[str, int]) -> None:
    """The model's parts beyond its layers, embeddings and head, to rows and groups:
    Perceiver's latents, MobileBERT's outer embeddings and pooler, Gemma 3n's per-layer
    embeddings, hyper-connections' head; the layers' other parts in the group other."""
    d, norm = spec.d_model, spec.norm
    added = latent_rows(d, spec.latents) if spec.latents is not None else {}
    if spec.bottleneck is not None and norm is not None:
        added = bottleneck_model_rows(spec.bottleneck, norm)
        groups["other"] = sum(layer.count * layer.other for layer in layers)
    for group, parts in added.items():
        rows += parts
        groups[group] += sum(r.params for r in parts)
    if spec.extras is not None:
        embedding, *other = model_extra_rows(d, spec.layers.decoder, spec.extras)
        rows += [embedding, *other]
        groups["embeddings"] += embedding.params
        groups["other"] = sum(layer.count * layer.other for layer in layers) + sum(
            r.params for r in other)
    elif any(layer.other for layer in layers):  # A.X-K2's norm gates, hyper-connections
        head = stream_head_rows(d, spec)
        rows += head
        groups["other"] = sum(layer.count * layer.other for layer in layers) + sum(
            r.params for r in head)



def _loop_states(spec: ModelSpec, rows: list[Row], groups: dict[str, int]) -> None:
    """The learned d_model vectors looped layers start from (HRM-Text's z_L_init), to rows and
    the group other."""
    if spec.loops is None or not spec.loops.states:
        return
    n, d = spec.loops.states, spec.d_model
    rows.append(Row("loop initial states", f"{n} x {d}", n * d))
    groups["other"] = groups.get("other", 0) + n * d
