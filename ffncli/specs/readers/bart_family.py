"""BART and its kin, as their ForConditionalGeneration class: mBART, PLBART, Pegasus, M2M-100,
Blenderbot, Marian, MVP, BigBird-Pegasus and SeamlessM4T's text model. The table also names the
kit's :func:`~ffncli.specs.hfconfig.bart_like_spec` here.
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config, bart_like_spec
from ffncli.specs.spec import ModelSpec


def mvp_spec(c: Config) -> ModelSpec:
    """MvpForConditionalGeneration without prompts: BART's shapes (vocabulary 50267)."""
    if c.bool("use_prompt", False):
        raise c.fail("use_prompt", "false (the prompt tables are not read)")
    return bart_like_spec(c, "mvp", positions="learned", embedding_norm=True, final_norm=False,
                          vocab_size=50267)


def bigbird_pegasus_spec(c: Config) -> ModelSpec:
    """BigBirdPegasusForConditionalGeneration: Pegasus' layers with learned positions (no
    offset), attention biases only with use_bias; block-sparse attention has full attention's
    projections."""
    spec = bart_like_spec(c, "bigbird_pegasus", positions="learned0", embedding_norm=False,
                          final_norm=True, vocab_size=96103, max_position_embeddings=4096,
                          encoder_layers=16, decoder_layers=16,
                          activation_function="gelu_new")
    assert spec.attention is not None
    bias = c.bool("use_bias", False)
    return replace(spec, attention=replace(spec.attention, qkv_bias=bias, out_bias=bias))


def seamless_text_spec(c: Config, family: str) -> ModelSpec:
    """SeamlessM4T(v2)ForTextToText, the class of the seq2seq mapping: the text encoder and
    decoder (M2M-100's shapes, hidden_size wide); the speech encoder, text-to-unit model and
    vocoder of the whole model are not in it."""
    return bart_like_spec(c, family, positions="buffer", embedding_norm=False, final_norm=True,
                          d_key="hidden_size", vocab_size=256102, encoder_layers=24,
                          decoder_layers=24, encoder_ffn_dim=8192, decoder_ffn_dim=8192,
                          activation_function="relu")


def marian_spec(c: Config) -> ModelSpec:
    """MarianMTModel: BART's layers, sinusoidal tables (parameters), no embedding or final
    norms; one word table for both stacks, as share_encoder_decoder_embeddings says."""
    vocab = c.int("vocab_size", 58101)
    if not c.bool("share_encoder_decoder_embeddings", True):
        raise c.fail("share_encoder_decoder_embeddings", "true (separate decoder embeddings "
                     "are not read)")
    if c.int("decoder_vocab_size", vocab) != vocab:
        raise c.fail("decoder_vocab_size", f"vocab_size ({vocab:,})")
    return bart_like_spec(c, "marian", positions="sinusoidal", embedding_norm=False,
                          final_norm=False, vocab_size=58101)
