"""Encoders ffncli counts as their bare model (issue 40): BERT's relatives with a part of their
own (ALBERT's shared layers, Longformer's global projections, RoFormer's rotary table...), and
BERT-shaped decoders. Each reader takes its transformers 5.25 config class's defaults for the
keys a config omits (tests/data/zoo/configs)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import (
    Config,
    _with_defaults,
    bert_relative_spec,
    gated_decoder_spec,
    rotary_bert_spec,
)
from ffncli.specs.layers import BottleneckSpec, LatentSpec
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def built(spec: ModelSpec) -> tuple[AttentionSpec, EmbeddingsSpec, NormSpec]:
    """The attention, embeddings and norm the kit's BERT and BART readers always build."""
    assert spec.attention is not None and spec.embeddings is not None and spec.norm is not None
    return spec.attention, spec.embeddings, spec.norm


def albert_spec(c: Config) -> ModelSpec:
    """AlbertModel: ELECTRA's factorized embeddings (embedding_size wide, then a projection with
    bias), BERT's layers and pooler; num_hidden_groups groups of inner_group_num layers hold
    every parameter, each group run num_hidden_layers / num_hidden_groups times."""
    c = _with_defaults(c, vocab_size=30000, embedding_size=128, hidden_size=4096,
                       num_hidden_layers=12, num_hidden_groups=1, num_attention_heads=64,
                       intermediate_size=16384, inner_group_num=1, hidden_act="gelu_new")
    spec = bert_relative_spec(c, "albert")
    _, embeddings, _ = built(spec)
    runs, groups, inner = (c.int("num_hidden_layers"), c.int("num_hidden_groups"),
                           c.int("inner_group_num"))
    if runs % groups:
        raise c.fail("num_hidden_groups", f"a divisor of num_hidden_layers ({runs})")
    dim = c.int("embedding_size")
    return replace(spec, layers=LayersSpec(encoder=runs * inner, decoder=0,
                                           shared=groups * inner),
                   embeddings=replace(embeddings, dim=dim if dim != spec.d_model else None,
                                      factorized=True))


def deberta_spec(c: Config) -> ModelSpec:
    """DebertaModel (v1): BERT's layers without pooler, Q, K and V in one bias-free in_proj
    with biases on Q and V only; absolute positions only with position_biased_input, no token
    types by default; with relative_attention one table of 2 x max_relative_positions rows
    (max_position_embeddings when not set) for all layers. The per-layer position projections
    of pos_att_type and talking heads are refused."""
    c = _with_defaults(c, vocab_size=50265, type_vocab_size=0)
    spec = bert_relative_spec(c, "deberta", pooler=False)
    attention, embeddings, _ = built(spec)
    if c.data.get("embedding_size", spec.d_model) != spec.d_model:
        raise c.fail("embedding_size", f"hidden_size ({spec.d_model:,}); an embedding "
                     "projection is not read")
    if c.bool("talking_head", False):
        raise c.fail("talking_head", "false (the talking-head projections are not read)")
    relative = 0
    if c.bool("relative_attention", False):
        if c.data.get("pos_att_type"):
            raise c.fail("pos_att_type", "empty (its per-layer position projections are not "
                         "read)")
        span = c.data.get("max_relative_positions", -1)
        span = span if isinstance(span, int) and not isinstance(span, bool) and span > 0 \
            else spec.seq_len
        relative = 2 * span
    positions = embeddings.positions if c.bool("position_biased_input", True) else 0
    return replace(spec, attention=replace(attention, key_bias=False),
                   embeddings=replace(embeddings, positions=positions, relative=relative))


def roformer_spec(c: Config) -> ModelSpec:
    """RoFormerModel: BERT's layers without pooler; word and token-type tables and their norm
    embedding_size wide (a projection with bias to hidden_size when it differs); rotary
    positions from a sinusoidal table of max_position_embeddings x head_dim, a parameter."""
    c = _with_defaults(c, vocab_size=50000, max_position_embeddings=1536)
    spec = bert_relative_spec(c, "roformer", pooler=False)
    attention, embeddings, _ = built(spec)
    dim = c.int("embedding_size", spec.d_model)
    return replace(spec, embeddings=replace(
        embeddings, dim=dim if dim != spec.d_model else None, factorized=True,
        position_dim=spec.d_model // attention.heads))


def longformer_spec(c: Config) -> ModelSpec:
    """LongformerModel: RoBERTa's layers and pooler (max_position_embeddings rows), each layer
    with a second Q, K and V for its global tokens."""
    spec = bert_relative_spec(c, "longformer")
    attention, _, _ = built(spec)
    return replace(spec, attention=replace(attention, extra_projections=3))


def gte_spec(c: Config) -> ModelSpec:
    """GteModel: post-norm layers with rotary positions, attention with biases, a gated FFN
    whose gate and up projections have no bias and whose down projection has one; one token
    type by default, no pooler."""
    spec = rotary_bert_spec(c, "gte", pooler=False, gated=True, bias=False,
                            vocab_size=250048, max_position_embeddings=8192,
                            type_vocab_size=1)
    attention, _, _ = built(spec)
    return replace(spec, ffn=replace(spec.ffn, down_bias=True),
                   attention=replace(attention, qkv_bias=True, out_bias=True))


def bert_decoder_spec(c: Config) -> ModelSpec:
    """BertGenerationDecoder: BERT's post-norm layers as a decoder (cross-attention with
    add_cross_attention), learned positions, no token types, the embedding norm, no pooler;
    the head tied to the word table, with a bias."""
    c = _with_defaults(c, vocab_size=50358, hidden_size=1024, num_hidden_layers=24,
                       num_attention_heads=16, intermediate_size=4096, type_vocab_size=0)
    spec = bert_relative_spec(c, "bert-generation", pooler=False)
    _, embeddings, _ = built(spec)
    return replace(spec, layers=LayersSpec(encoder=0, decoder=spec.layers.encoder,
                                           cross=c.bool("add_cross_attention", False)),
                   embeddings=replace(embeddings, token_types=0, head=c.head(True),
                                      head_bias=True))


def xmod_spec(c: Config) -> ModelSpec:
    """XmodModel: RoBERTa's layers and pooler, after each FFN a bottleneck adapter
    (hidden_size / adapter_reduction_factor wide, with biases) per language of languages, a
    LayerNorm of its own with adapter_layer_norm; pre_norm adds a norm after the last layer."""
    spec = bert_relative_spec(c, "xmod", final_norm=c.bool("pre_norm", False))
    _, _, norm = built(spec)
    languages = c.data.get("languages", ["en_XX"])
    if not isinstance(languages, list) or not languages:
        raise c.fail("languages", "a list of language names")
    reduction = c.int("adapter_reduction_factor", 2)
    return replace(spec, ffn=replace(spec.ffn, adapters=len(languages),
                                     adapter_d_ff=spec.d_model // reduction),
                   norm=replace(norm, per_layer=2 + c.bool("adapter_layer_norm", False)))


def convbert_spec(c: Config) -> ModelSpec:
    """ConvBertModel: BERT's embeddings (ELECTRA's projection when embedding_size differs) and
    post-norm layers without pooler; attention has num_attention_heads / head_ratio heads of
    (hidden_size / heads) / 2, beside a span-based dynamic convolution of conv_kernel_size
    (AttentionSpec.span_conv). Grouped FFNs (num_groups > 1) are refused."""
    if c.int("num_groups", 1) != 1:
        raise c.fail("num_groups", "1 (grouped FFN projections are not read)")
    spec = bert_relative_spec(c, "convbert", pooler=False)
    attention, embeddings, _ = built(spec)
    heads = max(attention.heads // c.int("head_ratio", 2), 1)
    if spec.d_model % heads:
        raise c.fail("head_ratio", f"a ratio leaving heads that divide hidden_size "
                     f"({spec.d_model:,})")
    dim = c.int("embedding_size", spec.d_model)
    return replace(spec, attention=replace(attention, heads=heads,
                                           head_dim=spec.d_model // heads // 2,
                                           span_conv=c.int("conv_kernel_size", 9)),
                   embeddings=replace(embeddings, dim=dim if dim != spec.d_model else None,
                                      factorized=True))


def funnel_spec(c: Config) -> ModelSpec:
    """FunnelModel: the blocks' layers (block_sizes) and the num_decoder_layers layers that
    upsample after them, all alike (pooling has no parameters): Transformer-XL's relative
    attention (n_head heads of d_head, Q without bias), post-norm, an FFN of d_inner; word
    embeddings and their norm, no position or token-type table. Repeated blocks (block_repeats
    other than 1, sharing their layers) are refused."""
    sizes = c.data.get("block_sizes", [4, 4, 4])
    repeats = c.data.get("block_repeats") or [1] * (len(sizes) if isinstance(sizes, list) else 0)
    if not isinstance(sizes, list) or not sizes or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
        raise c.fail("block_sizes", "a list of layer counts")
    if repeats != [1] * len(sizes):
        raise c.fail("block_repeats", "1 for every block (repeated blocks are not read)")
    d = c.int("d_model", 768)
    heads = c.int("n_head", 12)
    return ModelSpec(
        name=c.name("funnel"), family="funnel", description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("d_inner", 3072), activation=c.act("hidden_act", "gelu_new")),
        attention=AttentionSpec(heads=heads, head_dim=c.int("d_head", 64), query_bias=False,
                                xl_relative=True),
        norm=NormSpec(final=False),
        layers=LayersSpec(encoder=sum(sizes) + c.int0("num_decoder_layers", 2), decoder=0),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 30522), norm=True, head="none"),
    )


def fnet_spec(c: Config) -> ModelSpec:
    """FNetModel: BERT's embeddings and a d_model -> d_model projection with bias after their
    norm; each layer a Fourier transform (no parameters) and BERT's FFN, two norms; the
    pooler."""
    spec = bert_relative_spec(c, "fnet", vocab_size=32000, type_vocab_size=4,
                              hidden_act="gelu_new", num_attention_heads=1)
    _, embeddings, _ = built(spec)
    return replace(spec, attention=None, embeddings=replace(embeddings, project=True))


def esmc_spec(c: Config) -> ModelSpec:
    """EsmcModel (ESM C): LLaMA's layers (a gated FFN, rotary positions) as an encoder, with
    LayerNorms with biases, bias-free norms over all of Q and all of K, a final LayerNorm
    without bias; no head."""
    c = _with_defaults(c, vocab_size=64, hidden_size=2560, intermediate_size=6912,
                       num_hidden_layers=80, num_attention_heads=40, head_dim=64)
    spec = gated_decoder_spec(c, "esmc", qk_norm="heads",
                              norm=NormSpec(bias=True, final=True, final_bias=False))
    _, embeddings, _ = built(spec)
    return replace(spec, layers=LayersSpec(encoder=spec.layers.decoder, decoder=0),
                   embeddings=replace(embeddings, head="none"))


def luke_spec(c: Config) -> ModelSpec:
    """LukeModel: RoBERTa's layers and pooler; entity embeddings (entity_vocab_size x
    entity_emb_size, projected to hidden_size without bias, their own position and
    token-type tables and norm); with use_entity_aware_attention three more queries a layer
    (word-to-entity, entity-to-word, entity-to-entity)."""
    spec = bert_relative_spec(c, "luke", vocab_size=50267)
    attention, embeddings, _ = built(spec)
    aware = c.bool("use_entity_aware_attention", True)
    return replace(spec, attention=replace(attention, extra_projections=3 if aware else 0),
                   embeddings=replace(embeddings, entities=c.int("entity_vocab_size", 500000),
                                      entity_dim=c.int("entity_emb_size", 256)))


def roc_bert_spec(c: Config) -> ModelSpec:
    """RoCBertModel: BERT's layers and pooler; beside the word table a shape table
    (shape_vocab_size x shape_embed_dim) and a pronunciation table (pronunciation_vocab_size
    x pronunciation_embed_dim), the three vectors joined and projected to hidden_size.
    Configs that sum the tables instead (concat_input, enable_shape or enable_pronunciation
    false) are refused."""
    for key in ("concat_input", "enable_shape", "enable_pronunciation"):
        if not c.bool(key, True):
            raise c.fail(key, "true (tables summed instead of joined are not read)")
    spec = bert_relative_spec(c, "roc_bert")
    _, embeddings, _ = built(spec)
    tables = ((c.int("shape_vocab_size", 24858), c.int("shape_embed_dim", 512)),
              (c.int("pronunciation_vocab_size", 910), c.int("pronunciation_embed_dim", 768)))
    return replace(spec, embeddings=replace(embeddings, side_tables=tables))


def nystromformer_spec(c: Config) -> ModelSpec:
    """NystromformerModel: BERT's layers without pooler, max_position_embeddings + 2 position
    rows; with conv_kernel_size a depthwise convolution over each head's values (heads x
    kernel). Landmark attention has full attention's projections."""
    spec = bert_relative_spec(c, "nystromformer", pooler=False, position_offset=2,
                              vocab_size=30000, max_position_embeddings=510,
                              hidden_act="gelu_new")
    attention, _, _ = built(spec)
    kernel = c.data.get("conv_kernel_size", 65)
    return replace(spec, attention=replace(
        attention, value_conv=0 if kernel is None else c.int("conv_kernel_size")))


def squeezebert_spec(c: Config) -> ModelSpec:
    """SqueezeBertModel: BERT's embeddings, layers and pooler with every projection a 1x1
    convolution in groups: Q, K and V in q_groups (k_groups and v_groups must be the same),
    the attention's output in post_attention_groups, the FFN's two in intermediate_groups
    (output_groups must be the same)."""
    spec = bert_relative_spec(c, "squeezebert")
    attention, _, _ = built(spec)
    if c.int("embedding_size", spec.d_model) != spec.d_model:
        raise c.fail("embedding_size", f"hidden_size ({spec.d_model:,})")
    qkv, ffn = c.int("q_groups", 4), c.int("intermediate_groups", 4)
    for key, same, value in (("k_groups", "q_groups", qkv), ("v_groups", "q_groups", qkv),
                             ("output_groups", "intermediate_groups", ffn)):
        if c.int(key, 4) != value:
            raise c.fail(key, f"{same} ({value})")
    out = c.int("post_attention_groups", 1)
    for key, groups in (("q_groups", qkv), ("post_attention_groups", out),
                        ("intermediate_groups", ffn)):
        if spec.d_model % groups or spec.ffn.d_ff % groups:
            raise c.fail(key, "a divisor of hidden_size and intermediate_size")
    return replace(spec, ffn=replace(spec.ffn, groups=ffn),
                   attention=replace(attention, qkv_groups=qkv, out_groups=out))


def _pairs(c: Config, rows_key: str, widths_key: str, default: tuple[list[int], list[int]],
           total: int) -> tuple[tuple[int, int], ...]:
    """Reformer's axial tables: (axial_pos_shape[i], axial_pos_embds_dim[i]), the widths
    summing to hidden_size."""
    values = [c.data.get(key) or fallback for key, fallback in zip((rows_key, widths_key),
                                                                    default, strict=True)]
    for key, value in zip((rows_key, widths_key), values, strict=True):
        if not isinstance(value, list) or len(value) != len(values[0]) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in value):
            rows = values[0]  # checked first: a list when the widths are checked
            raise c.fail(key, f"a list of {len(rows)} sizes" if isinstance(rows, list)
                         else "a list of sizes")
    if sum(values[1]) != total:
        raise c.fail(widths_key, f"widths summing to hidden_size ({total:,})")
    return tuple(zip(values[0], values[1], strict=True))


def reformer_spec(c: Config) -> ModelSpec:
    """ReformerModel: layers of local attention (Q, K, V, O) or LSH attention (one projection
    for queries and keys) by attn_layers, num_attention_heads of attention_head_size, no
    biases; a norm before attention and before the FFN (feed_forward_size, with biases); axial
    position tables (axial_pos_shape x axial_pos_embds_dim) or a learned table; the final norm
    over both reversible streams (2 x hidden_size); no head."""
    d = c.int("hidden_size", 256)
    kinds = c.names("attn_layers", None, ("local", "lsh")) or [
        "local", "lsh", "local", "lsh", "local", "lsh"]
    attention = AttentionSpec(heads=c.int("num_attention_heads", 12),
                              head_dim=c.int("attention_head_size", 64), qkv_bias=False,
                              out_bias=False)
    positions = c.int("max_position_embeddings", 4096)
    axial = _pairs(c, "axial_pos_shape", "axial_pos_embds_dim", ([64, 64], [64, 192]), d) \
        if c.bool("axial_pos_embds", True) else ()
    return ModelSpec(
        name=c.name("reformer"), family="reformer", description=f"from {c.source}", d_model=d,
        seq_len=positions,
        ffn=FfnSpec(d_ff=c.int("feed_forward_size", 512), activation=c.act("hidden_act",
                                                                           "relu")),
        attention=attention,
        norm=NormSpec(final=True, final_width=2 * d),
        layers=LayersSpec(encoder=len(kinds), decoder=0),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 320),
                                  positions=0 if axial else positions, axial=axial,
                                  head="none"),
        encoder_pattern=tuple(LayerKind("local encoder") if k == "local" else LayerKind(
            "lsh encoder", attention=replace(attention, shared_qk=True)) for k in kinds))


def perceiver_spec(c: Config) -> ModelSpec:
    """PerceiverModel without pre- or post-processors: num_latents latents of d_latents cross-
    attend once to d_model-wide inputs (num_cross_attention_heads; queries and keys as wide as
    the inputs, or the latents with cross_attention_shape_for_attention "q"; an MLP of
    cross_attention_widening_factor), then num_self_attends_per_block self-attention layers
    (an MLP of self_attention_widening_factor), the block run num_blocks times with the same
    weights. qk_channels and v_channels other than the latents' width are refused."""
    d, inputs = c.int("d_latents", 1280), c.int("d_model", 768)
    for key in ("qk_channels", "v_channels"):
        if c.data.get(key) not in (None, d):
            raise c.fail(key, f"null or d_latents ({d:,})")
    shape = c.data.get("cross_attention_shape_for_attention", "kv")
    if shape not in ("q", "kv"):
        raise c.fail("cross_attention_shape_for_attention", "'q' or 'kv'")
    qk = d if shape == "q" or c.data.get("qk_channels") is not None else inputs
    v = d if c.data.get("v_channels") is not None else qk
    per_block, blocks = c.int("num_self_attends_per_block", 26), c.int("num_blocks", 1)
    heads = c.int("num_self_attention_heads", 8)
    if d % heads:
        raise c.fail("num_self_attention_heads", f"a divisor of d_latents ({d:,})")
    return ModelSpec(
        name=c.name("perceiver"), family="perceiver", description=f"from {c.source}",
        d_model=d, seq_len=c.int("max_position_embeddings", 2048),
        ffn=FfnSpec(d_ff=c.int("self_attention_widening_factor", 1) * d,
                    activation=c.act("hidden_act", "gelu")),
        attention=AttentionSpec(heads=heads), norm=NormSpec(final=False),
        layers=LayersSpec(encoder=per_block * blocks, decoder=0, shared=per_block),
        latents=LatentSpec(latents=c.int("num_latents", 256), inputs=inputs, qk=qk, v=v,
                           widening=c.int("cross_attention_widening_factor", 1)))


def mobilebert_spec(c: Config) -> ModelSpec:
    """MobileBertModel: layers whose attention and num_feedforward_networks FFNs (each with
    its norm) run true_hidden_size (intra_bottleneck_size) wide inside a hidden_size stream,
    with MobileBERT's bottlenecks (key_query_shared_bottleneck, use_bottleneck_attention) and
    embeddings (embedding_size, trigram_input); the pooler's dense layer with
    classifier_activation. Norms (no_norm or layer_norm) have a weight and a bias either way.
    use_bottleneck false is refused."""
    if not c.bool("use_bottleneck", True):
        raise c.fail("use_bottleneck", "true (MobileBERT without bottlenecks is not read)")
    outer, d = c.int("hidden_size", 512), c.int("intra_bottleneck_size", 128)
    heads = c.int("num_attention_heads", 4)
    if d % heads:
        raise c.fail("num_attention_heads", f"a divisor of intra_bottleneck_size ({d:,})")
    stack = c.int("num_feedforward_networks", 4)
    through = c.bool("use_bottleneck_attention", False)
    return ModelSpec(
        name=c.name("mobilebert"), family="mobilebert", description=f"from {c.source}",
        d_model=d, seq_len=c.int("max_position_embeddings", 512),
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 512), activation=c.act("hidden_act", "relu"),
                    stack=stack),
        attention=AttentionSpec(heads=heads), norm=NormSpec(per_layer=1 + stack, final=False),
        layers=LayersSpec(encoder=c.int("num_hidden_layers", 24), decoder=0),
        bottleneck=BottleneckSpec(
            outer=outer, shared_qk=c.bool("key_query_shared_bottleneck", True),
            value_outer=not through, vocab=c.int("vocab_size", 30522),
            embedding=c.int("embedding_size", 128), trigram=c.bool("trigram_input", True),
            positions=c.int("max_position_embeddings", 512),
            token_types=c.int0("type_vocab_size", 2),
            pooler=c.bool("classifier_activation", True)))
