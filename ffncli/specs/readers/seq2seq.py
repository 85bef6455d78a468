"""Encoder-decoders ffncli counts as their ForConditionalGeneration class (issue 40), and a
decoder that attends to an encoder outside the model (TrOCR's). Each reader takes its
transformers 5.25 config class's defaults for the keys a config omits
(tests/data/zoo/configs)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import (
    GEMMA2_NORM,
    Config,
    _with_defaults,
    bart_like_spec,
    bert_like_spec,
    gemma_spec,
    same_stacks,
    t5_spec,
)
from ffncli.specs.readers.encoders import built
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def led_spec(c: Config) -> ModelSpec:
    """LEDForConditionalGeneration: BART's layers; the encoder's self-attention Longformer's
    (a second Q, K and V for global tokens); learned positions without offset,
    max_encoder_position_embeddings rows for the encoder and max_decoder_position_embeddings
    for the decoder; the embedding norms, no final norms."""
    encoder_rows = c.int("max_encoder_position_embeddings", 16384)
    spec = bart_like_spec(c, "led", positions="learned0", embedding_norm=True,
                          final_norm=False, max_position_embeddings=encoder_rows)
    attention, embeddings, _ = built(spec)
    plain = LayerKind(attention=attention)  # the decoder's: no global projections
    return replace(spec, attention=replace(attention, extra_projections=3),
                   embeddings=replace(embeddings, decoder_positions=c.int(
                       "max_decoder_position_embeddings", 1024)),
                   pattern=(plain,) * spec.layers.decoder)


def _sparse(spec: ModelSpec, experts: FfnSpec, dense: FfnSpec, encoder: list[bool],
            decoder: list[bool]) -> ModelSpec:
    """An encoder-decoder whose layers are a mixture of experts where the lists say True, a
    dense FFN elsewhere (Switch Transformers, NLLB-MoE)."""
    def kinds(stack: str, sparse: list[bool]) -> tuple[LayerKind, ...]:
        return tuple(LayerKind(stack) if s else LayerKind(f"dense {stack}", ffn=dense)
                     for s in sparse)
    return replace(spec, ffn=experts, encoder_pattern=kinds("encoder", encoder),
                   pattern=kinds("decoder", decoder))


def switch_transformers_spec(c: Config) -> ModelSpec:
    """SwitchTransformersForConditionalGeneration: T5's stacks (dense_act_fn, no gating), in
    each stack num_sparse_*_layers layers a mixture of num_experts experts of d_ff, one per
    token, behind a router (router_bias); layer i sparse when i mod (layers // sparse) is 1,
    as the class builds them."""
    c = _with_defaults(c, vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12,
                       num_heads=12, num_experts=8)
    spec = t5_spec(c)
    dense = replace(spec.ffn, activation=c.act("dense_act_fn", "relu"), gated=False)
    experts = replace(dense, experts=c.int("num_experts"), top_k=1,
                      router_bias=c.bool("router_bias", False))

    def sparse(n: int, layers_key: str, sparse_key: str) -> list[bool]:
        count = c.at_most(sparse_key, c.int0(sparse_key, 3), layers_key, n)
        step = n // count if count else n
        return [i % step == 1 or step == 1 for i in range(n)]
    return replace(_sparse(spec, experts, dense,
                           sparse(spec.layers.encoder, "num_layers", "num_sparse_encoder_layers"),
                           sparse(spec.layers.decoder, "num_decoder_layers",
                                  "num_sparse_decoder_layers")),
                   family="switch_transformers", name=c.name("switch_transformers"))


def nllb_moe_spec(c: Config) -> ModelSpec:
    """NllbMoeForConditionalGeneration: M2M-100's stacks, layer i a mixture of num_experts
    experts (two per token, each an FFN with biases) behind a router (router_bias) when i + 1 is
    a multiple of the stack's *_sparse_step, a dense FFN elsewhere."""
    spec = bart_like_spec(c, "nllb-moe", positions="buffer", embedding_norm=False,
                          final_norm=True, vocab_size=128112, activation_function="relu")
    dense = spec.ffn
    experts = replace(dense, experts=c.int("num_experts", 128), top_k=2,
                      router_bias=c.bool("router_bias", False))

    def sparse(n: int, key: str) -> list[bool]:
        step = c.int0(key, 4)
        return [bool(step) and (i + 1) % step == 0 for i in range(n)]
    return _sparse(spec, experts, dense, sparse(spec.layers.encoder, "encoder_sparse_step"),
                   sparse(spec.layers.decoder, "decoder_sparse_step"))


def _same_shape(c: Config, encoder: ModelSpec, decoder: ModelSpec) -> None:
    """Stacks of one width, attention and FFN, or the config is refused (key 'decoder')."""
    if (decoder.d_model, decoder.attention, decoder.ffn) != (encoder.d_model, encoder.attention,
                                                             encoder.ffn):
        raise c.fail("decoder", "the encoder's widths, heads and FFN (stacks of different "
                     "shapes are not read)")


def t5gemma_spec(c: Config) -> ModelSpec:
    """T5GemmaForConditionalGeneration: an encoder and a decoder of Gemma 2's layers (four
    norms a layer; the decoder's cross-attention has two more), each stack its own word table
    (the head tied to the decoder's) and final norm. Stacks of different widths are refused."""
    stacks = []
    for key in ("encoder", "decoder"):
        sub = c.mapping(key) or {}
        stacks.append(gemma_spec(Config({"model_type": "t5_gemma_module", **sub},
                                        f"{c.source}: {key}"), "t5gemma", norm=GEMMA2_NORM))
    encoder, decoder = stacks
    _same_shape(c, encoder, decoder)
    cross = (c.mapping("decoder") or {}).get("cross_attention_hidden_size")
    if cross not in (None, encoder.d_model):
        raise c.fail("decoder", f"cross_attention_hidden_size {encoder.d_model:,} (the "
                     "encoder's width)")
    _, embeddings, norm = built(decoder)
    return replace(encoder, name=c.name("t5gemma"), family="t5gemma",
                   layers=LayersSpec(encoder=encoder.layers.decoder,
                                     decoder=decoder.layers.decoder),
                   norm=replace(norm, cross=2),
                   embeddings=replace(embeddings, decoder_vocab=embeddings.vocab,
                                      head=c.head(True)))


def trocr_spec(c: Config) -> ModelSpec:
    """TrOCRForCausalLM: BART's decoder layers, each with cross-attention to an image encoder
    outside the model (cross_attention_hidden_size other than d_model is refused); learned
    positions (2 extra rows) unless use_learned_position_embeddings says sinusoidal (a
    buffer); the embedding norm by layernorm_embedding; no final norm; the head tied."""
    c = _with_defaults(c, vocab_size=50265, d_model=1024, decoder_layers=12,
                       decoder_attention_heads=16, decoder_ffn_dim=4096,
                       max_position_embeddings=512)
    cross = c.data.get("cross_attention_hidden_size")
    if cross is not None and cross != c.int("d_model"):
        raise c.fail("cross_attention_hidden_size", f"null or d_model ({c.int('d_model'):,})")
    learned = c.bool("use_learned_position_embeddings", True)
    spec = bart_like_spec(
        c, "trocr", positions="learned" if learned else "buffer",
        embedding_norm=c.bool("layernorm_embedding", True), final_norm=False,
        encoder_attention_heads=c.int("decoder_attention_heads"),
        encoder_ffn_dim=c.int("decoder_ffn_dim"))
    _, embeddings, _ = built(spec)
    return replace(spec, layers=LayersSpec(encoder=0, decoder=spec.layers.decoder, cross=True),
                   embeddings=replace(embeddings, per_stack=False))


def fsmt_spec(c: Config) -> ModelSpec:
    """FSMTForConditionalGeneration: BART's post-norm layers without embedding or final norms;
    the encoder's word table of src_vocab_size, the decoder's of tgt_vocab_size, the output
    projection untied by default; each stack a sinusoidal table (a parameter) of
    max_position_embeddings + pad_token_id + 1 rows."""
    source = c.int("src_vocab_size", 42024)  # vocab_size is tgt_vocab_size's other name
    spec = bart_like_spec(Config({**c.data, "vocab_size": source}, c.source), "fsmt",
                          positions="learned", embedding_norm=False, final_norm=False,
                          activation_function="relu")
    _, embeddings, _ = built(spec)
    return replace(spec, embeddings=replace(
        embeddings, decoder_vocab=c.int("tgt_vocab_size", 42024), head=c.head(False),
        position_offset=c.int0("pad_token_id", 1) + 1))


def pegasus_x_spec(c: Config) -> ModelSpec:
    """PegasusXForConditionalGeneration: Pegasus' layers without attention biases, the
    encoder's with a third norm (for its global tokens) as the decoder's cross-attention
    brings; num_global_tokens learned rows; sinusoidal positions computed, not stored; final
    norms, the head tied."""
    spec = bart_like_spec(c, "pegasus_x", positions="buffer", embedding_norm=False,
                          final_norm=True, vocab_size=96103, max_position_embeddings=16384,
                          encoder_layers=16, decoder_layers=16)
    attention, embeddings, norm = built(spec)
    return replace(spec, attention=replace(attention, qkv_bias=False, out_bias=False),
                   norm=replace(norm, per_layer=3, cross=0),
                   embeddings=replace(embeddings,
                                      extra_rows=c.int("num_global_tokens", 32)))


def prophetnet_spec(c: Config) -> ModelSpec:
    """ProphetNetForConditionalGeneration: BART's post-norm layers; the decoder's
    self-attention projects relative-position logits (hidden_size -> num_buckets x heads, with a
    bias) in every layer; one word table, each stack max_position_embeddings learned rows and
    an embedding norm, the decoder ngram stream rows; no final norms; the head tied."""
    d = c.int("hidden_size", 1024)
    heads = same_stacks(c, d, "hidden_size", "num_{}_attention_heads")
    attention = AttentionSpec(heads=heads)
    relative = replace(attention, relative_projection=c.int("num_buckets", 32) * heads)
    seq = c.int("max_position_embeddings", 512)
    decoder = c.int("num_decoder_layers", 12)
    return ModelSpec(
        name=c.name("prophetnet"), family="prophetnet", description=f"from {c.source}",
        d_model=d, seq_len=seq,
        ffn=FfnSpec(d_ff=c.int("encoder_ffn_dim", 4096),
                    activation=c.act("activation_function", "gelu")),
        attention=attention, norm=NormSpec(final=False),
        layers=LayersSpec(encoder=c.int("num_encoder_layers", 12), decoder=decoder),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 30522), positions=seq, norm=True,
                                  head=c.head(True), per_stack=True,
                                  extra_rows=c.int("ngram", 2)),
        pattern=(LayerKind(attention=relative),) * decoder)


def t5gemma2_spec(c: Config) -> ModelSpec:
    """T5Gemma2ForConditionalGeneration's language model: the encoder's text_config and the
    decoder, Gemma 3's layers (four norms, norms on Q and K); the decoder's merged attention
    attends to the encoder with its self-attention's projections; one word table for both
    stacks and the head, and its end-of-image row; final norms. The encoder's vision tower
    and projector are named, not counted. Stacks of different shapes are refused."""
    encoder = Config(c.mapping("encoder") or {}, f"{c.source}: encoder")
    text = Config({"model_type": "t5gemma2_text", **(encoder.mapping("text_config") or {})},
                  f"{c.source}: encoder: text_config")
    decoder = Config({"model_type": "t5gemma2_decoder", **(c.mapping("decoder") or {})},
                     f"{c.source}: decoder")
    spec, other = (gemma_spec(x, "t5gemma2", norm=GEMMA2_NORM, qk_norm="head")
                   for x in (text, decoder))
    _same_shape(c, spec, other)
    _, embeddings, norm = built(spec)
    vision = encoder.data.get("vision_config")
    kind = str(vision.get("model_type", "?"))[:40] if isinstance(vision, dict) else ""
    return replace(spec, name=c.name("t5gemma2"),
                   layers=LayersSpec(encoder=spec.layers.decoder, decoder=other.layers.decoder,
                                     merged_cross=True),
                   norm=replace(norm, cross=0),
                   embeddings=replace(embeddings, head=c.head(True), extra_rows=1),
                   uncounted=(f"vision tower ({kind})", "what joins them to the language model")
                   if kind else ())


def encoder_decoder_spec(c: Config) -> ModelSpec:
    """EncoderDecoderModel of two BERT configs (``encoder``: BertModel with its pooler;
    ``decoder``: BertLMHeadModel with add_cross_attention, its head a dense layer and norm
    before the word table, with a bias): each stack its own word, position and token-type
    tables and embedding norm. Other pairs, and stacks of different shapes, are refused."""
    stacks = []
    for key in ("encoder", "decoder"):
        sub = c.mapping(key) or {}
        if sub.get("model_type") != "bert":
            raise c.fail(key, "a 'bert' config (other encoders and decoders are not read)")
        stacks.append(bert_like_spec(Config(sub, f"{c.source}: {key}"), "bert"))
    encoder, decoder = stacks
    _same_shape(c, encoder, decoder)
    dec = Config(c.mapping("decoder") or {}, f"{c.source}: decoder")
    if not dec.bool("add_cross_attention", False):
        raise dec.fail("add_cross_attention", "true (the decoder attends to the encoder)")
    _, embeddings, _ = built(encoder)
    _, other, _ = built(decoder)
    if other.token_types != embeddings.token_types:
        raise dec.fail("type_vocab_size", f"the encoder's ({embeddings.token_types})")
    return replace(encoder, name=c.name("encoder-decoder"), family="encoder-decoder",
                   layers=LayersSpec(encoder=encoder.layers.encoder,
                                     decoder=decoder.layers.encoder),
                   embeddings=replace(embeddings, per_stack=True, decoder_vocab=other.vocab,
                                      decoder_positions=other.positions, head=dec.head(True),
                                      head_bias=True, head_transform=True))
