"""The rows of a model's embeddings: the word table and its relatives (positions, token types,
projections, side tables, entities), ELECTRA's factorized tables, MobileBERT's embeddings and
Gemma 3n's per-layer embeddings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ffncli.counting.parts import Row, linear, norm_params
from ffncli.specs.spec import EmbeddingsSpec, ModelSpec, NormSpec

if TYPE_CHECKING:  # a config reader builds them (specs/layers.py): off a preset's start-up
    from ffncli.specs.layers import BottleneckSpec, LayerExtrasSpec


def model_extra_rows(d: int, layers: int, x: LayerExtrasSpec) -> tuple[Row, ...]:
    """Gemma 3n's parts of the whole model: the per-layer embeddings, the stream's projection
    to the per-layer inputs and its norm, the AltUp projections in and out (n - 1 each)."""
    w, n = layers * x.per_layer_width, x.altup_inputs
    return (
        Row("per-layer embeddings", f"{x.per_layer_vocab} x {w}", x.per_layer_vocab * w),
        Row("per-layer projection and norm", f"{d} x {w} + {x.per_layer_width}",
            d * w + x.per_layer_width),
    ) + ((Row("AltUp projections", f"2 x {n - 1} x {d} x {d}", 2 * (n - 1) * d * d),) if n
         else ())


def embedding_rows(spec: ModelSpec) -> tuple[Row, ...]:
    """The rows of a model's embeddings (their norms apart)."""
    emb, d = spec.embeddings, spec.d_model
    if emb is None:
        return ()
    dim = emb.dim or d
    rows = [codebook_tables(emb, dim) if emb.codebooks else
            Row("word embeddings", f"{emb.vocab} x {dim}", emb.vocab * dim)]
    if emb.decoder_vocab:
        rows.append(Row("decoder word embeddings", f"{emb.decoder_vocab} x {dim}",
                        emb.decoder_vocab * dim))
    if emb.factorized:
        return tuple(rows + _factorized_rows(emb, d))
    if dim != d:
        rows += [Row("project in", f"{dim} x {d}", dim * d)] + (
            [] if emb.project_in_only else [Row("project out", f"{d} x {dim}", d * dim)])
    rows += _position_rows(spec, emb) + _more_rows(emb, d) + value_patch_rows(emb, d)
    return tuple(rows) + side_table_rows(emb, d) + entity_rows(emb, d)


def codebook_tables(emb: EmbeddingsSpec, dim: int) -> Row:
    """MusicGen's word tables, one a codebook, each of the vocabulary and its pad / start
    token (vocab + 1 rows)."""
    k, rows = emb.codebooks, emb.vocab + 1
    return Row("codebook word embeddings", f"{k} x {rows} x {dim}", k * rows * dim)


def _position_rows(spec: ModelSpec, emb: EmbeddingsSpec) -> list[Row]:
    """The position and token-type tables (and the decoder's own, EmbeddingsSpec.per_stack)."""
    d, rows = spec.d_model, []
    if emb.positions:
        n, w = emb.positions + emb.position_offset, emb.position_dim or d
        rows.append(Row("position embeddings", f"{n} x {w}", n * w))
        if stack_copies(spec) > 1:
            n = emb.decoder_positions or n
            rows.append(Row("decoder position embeddings", f"{n} x {w}", n * w))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {d}", emb.token_types * d))
        if stack_copies(spec) > 1:
            rows.append(Row("decoder token-type embeddings", f"{emb.token_types} x {d}",
                            emb.token_types * d))
    return rows


def _more_rows(emb: EmbeddingsSpec, d: int) -> list[Row]:
    """The other tables and projections: relative positions, the mask vector, a projection,
    axial positions (Reformer), extra rows."""
    rows = []
    if emb.relative:
        rows.append(Row("relative position embeddings", f"{emb.relative} x {d}",
                        emb.relative * d))
    if emb.mask:
        rows.append(Row("mask embedding", f"{d}", d))
    if emb.project:
        rows.append(Row("embedding projection (with bias)", f"{d} x {d}", linear(d, d, True)))
    if emb.axial:
        shapes = " + ".join(f"{n} x {w}" for n, w in emb.axial)
        rows.append(Row("axial position embeddings", shapes, sum(n * w for n, w in emb.axial)))
    if emb.extra_rows:
        rows.append(Row("extra embedding rows", f"{emb.extra_rows} x {d}",
                        emb.extra_rows * d))
    return rows


def value_patch_rows(emb: EmbeddingsSpec, d: int) -> list[Row]:
    """NeoMME's value embeddings (a table of value_dim a token) and image patch embedder (its
    LayerNorm, patch_dim -> 2 d without bias, 2 d -> d with bias)."""
    rows = []
    if emb.value_dim:
        rows.append(Row("value embeddings", f"{emb.vocab} x {emb.value_dim}",
                        emb.vocab * emb.value_dim))
    if emb.patch_dim:
        p = emb.patch_dim
        rows.append(Row("image patch embedder", f"2 x {p} + {p} x {2 * d} + {2 * d} x {d}",
                        2 * p + p * 2 * d + linear(2 * d, d, True)))
    return rows


def side_table_rows(emb: EmbeddingsSpec, d: int) -> tuple[Row, ...]:
    """RoCBert: more tables beside the word table, each token's vectors joined and projected
    back to d_model (with a bias)."""
    if not emb.side_tables:
        return ()
    joined = d + sum(width for _, width in emb.side_tables)
    return tuple(Row("side table", f"{n} x {w}", n * w) for n, w in emb.side_tables) + (
        Row("joined tables' projection (with bias)", f"{joined} x {d}", linear(joined, d, True)),)


def entity_rows(emb: EmbeddingsSpec, d: int) -> tuple[Row, ...]:
    """LUKE's entity embeddings: the entity table, its projection to d_model (without bias)
    when narrower, entity position and token-type tables (as the words'); the norm apart."""
    if not emb.entities:
        return ()
    w = emb.entity_dim or d
    rows = [Row("entity embeddings", f"{emb.entities} x {w}", emb.entities * w)]
    if w != d:
        rows.append(Row("entity projection", f"{w} x {d}", w * d))
    if emb.positions:
        rows.append(Row("entity position embeddings", f"{emb.positions} x {d}",
                        emb.positions * d))
    if emb.token_types:
        rows.append(Row("entity token-type embeddings", f"{emb.token_types} x {d}",
                        emb.token_types * d))
    return tuple(rows)


def bottleneck_model_rows(b: BottleneckSpec, norm: NormSpec) -> dict[str, tuple[Row, ...]]:
    """MobileBERT's embeddings (outer wide: the word table, its projection from the word
    vector, with its neighbours' under trigram, positions, token types, the norm) and its
    pooler, by group."""
    o, e = b.outer, b.embedding * (3 if b.trigram else 1)
    return {
        "embeddings": (
            Row("word embeddings", f"{b.vocab} x {b.embedding}", b.vocab * b.embedding),
            Row("embedding projection (with bias)", f"{e} x {o}", linear(e, o, True)),
            Row("position embeddings", f"{b.positions} x {o}", b.positions * o),
            Row("token-type embeddings", f"{b.token_types} x {o}", b.token_types * o)),
        "norms": (Row("embedding norm", f"{o}", norm_params(o, norm)),),
        "pooler": (Row("pooler", f"{o} x {o}", linear(o, o, True)),) if b.pooler else (),
    }


def stack_copies(spec: ModelSpec) -> int:
    """2 when each stack of an encoder-decoder has its own position table and embedding norm
    (EmbeddingsSpec.per_stack), else 1."""
    emb = spec.embeddings
    both = spec.layers.encoder > 0 and spec.layers.decoder > 0
    return 2 if emb is not None and emb.per_stack and both else 1


def _factorized_rows(emb: EmbeddingsSpec, d: int) -> list[Row]:
    """ELECTRA: positions and token types as wide as the word table, then dim -> d_model."""
    dim = emb.dim or d
    rows = []
    if emb.positions:
        n, w = emb.positions + emb.position_offset, emb.position_dim or dim
        rows.append(Row("position embeddings", f"{n} x {w}", n * w))
    if emb.token_types:
        rows.append(Row("token-type embeddings", f"{emb.token_types} x {dim}",
                        emb.token_types * dim))
    if dim != d:
        rows.append(Row("project in (with bias)", f"{dim} x {d}", linear(dim, d, True)))
    return rows
