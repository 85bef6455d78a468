"""Every architecture ffncli knows, one row each: the one table of model types.

A row says, for one ``model_type`` of a Hugging Face ``config.json``:

- ``reader``: how its config becomes a spec: ``read("module.function", **options)`` names a
  reader of :mod:`ffncli.specs.readers` (built from :mod:`ffncli.specs.hfconfig`'s kit), whose
  module is imported only when a config of the type is read;
- ``ffn``: where a layer's FFN lies in its safetensors checkpoints (``gated_ffn``: T5 v1.1's
  gated variant), so that ``run``, ``permute-check`` and ``relu-stats`` can read it;
- ``forward``, ``names``, ``quirks``: which whole-model family of
  :mod:`ffncli.compute.forward.families` runs it, the names of its other tensors, and the few
  ways it differs from its family;
- ``gguf`` (``gguf_names``): the llama.cpp architecture that is read as this model type (and
  the tensor names of a GGUF file, when the forward runs one);
- ``not_run``: why the engine refuses its FFN (a mixture of experts it would compute wrongly).

Lists in messages ("supported: ...") follow the table's order. No NumPy here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import Any

from ffncli.base.validate import brief
from ffncli.errors import ConfigError
from ffncli.specs import hfconfig as H
from ffncli.specs.hfconfig import Config, read_config
from ffncli.specs.layouts import (
    BERT_FFN,
    BERT_NAMES,
    DISTILBERT_NAMES,
    GEMMA_NORMS,
    GGUF_LLAMA_NAMES,
    GPT2_NAMES,
    H_TO_4H_FFN,
    LLAMA_FFN,
    LLAMA_NAMES,
    MIXTRAL_FFN,
    PADDED_POSITIONS,
    QWEN_SLIDING_WINDOW,
    SLIDING_WINDOW,
    T5_FFN,
    T5_GATED_FFN,
    Layout,
)
from ffncli.specs.layouts import GGUF_FFN as GGUF_FFN  # named here for compute/weights.py
from ffncli.specs.layouts import GGUF_GATED_FFN as GGUF_GATED_FFN
from ffncli.specs.layouts import GGUF_MOE_FFN as GGUF_MOE_FFN
from ffncli.specs.refused import LACKS
from ffncli.specs.spec import ModelSpec, NormSpec, check_spec


@dataclass(frozen=True)
class Arch:
    reader: Callable[[Config], ModelSpec]
    ffn: Layout | None = None
    gated_ffn: Layout | None = None  # the layout when the spec's FFN is gated, if another
    forward: str | None = None  # the whole-model family that runs it
    names: Mapping[str, str] | None = None  # its tensors besides the FFN's, for the forward
    quirks: frozenset[str] = frozenset()  # see compute.forward.families
    gguf: str | None = None  # the GGUF general.architecture read as this model type
    gguf_names: Mapping[str, str] | None = None  # a GGUF file's tensor names, for the forward
    not_run: str | None = None
    fused_qkv: bool = False  # Q, K and V in one stored matrix (GPT-2's c_attn): one LoRA target


def read(name: str, **options: Any) -> Callable[[Config], ModelSpec]:
    """The reader ``module.function`` of :mod:`ffncli.specs.readers`, called with the config and
    ``options``; its module is imported when a config of the type is first read, so that the
    table costs no import at start-up."""
    module, function = name.rsplit(".", 1)

    def reader(c: Config) -> ModelSpec:
        spec: ModelSpec = getattr(import_module(f"ffncli.specs.readers.{module}"), function)(
            c, **options)
        return spec

    reader.__qualname__ = name
    reader.options = options  # type: ignore[attr-defined]  # what it is called with
    return reader


def multimodal(text_type: str) -> Callable[[Config], ModelSpec]:
    """The reader of a multimodal config whose ``text_config`` is read as ``text_type``
    (:func:`_multimodal`)."""
    def reader(c: Config) -> ModelSpec:
        return _multimodal(c, text_type)

    reader.__qualname__ = f"multimodal({text_type!r})"
    return reader


# The readers' modules (ffncli/specs/readers/): bert_family, t5_family, bart_family,
# gpt_family, llama_family, gemma_family, moe_family, ssm_family. Rows are appended at the end.
ARCHS: dict[str, Arch] = {
    "gpt2": Arch(read("gpt_family.gpt2_spec"),
                 Layout({"w1": "h.{i}.mlp.c_fc", "w2": "h.{i}.mlp.c_proj"}, linear=False),
                 forward="gpt2", names=GPT2_NAMES, fused_qkv=True),
    "bert": Arch(read("bert_family.bert_like_spec", family="bert"), BERT_FFN, forward="bert",
                 names=BERT_NAMES),
    "roberta": Arch(read("bert_family.bert_like_spec", family="roberta", vocab_default=50265),
                    BERT_FFN, forward="bert", names=BERT_NAMES,
                    quirks=frozenset({PADDED_POSITIONS})),
    "distilbert": Arch(read("bert_family.distilbert_spec"),
                       Layout({"w1": "layer.{i}.ffn.lin1", "w2": "layer.{i}.ffn.lin2"}),
                       forward="distilbert", names=DISTILBERT_NAMES),
    "t5": Arch(read("t5_family.t5_spec"), T5_FFN, gated_ffn=T5_GATED_FFN),
    "opt": Arch(read("gpt_family.opt_spec"), Layout({"w1": "layers.{i}.fc1",
                                                     "w2": "layers.{i}.fc2"})),
    "gpt_neox": Arch(read("gpt_family.gpt_neox_spec"),
                     Layout({"w1": "layers.{i}.mlp.dense_h_to_4h",
                             "w2": "layers.{i}.mlp.dense_4h_to_h"}), fused_qkv=True),
    "llama": Arch(read("llama_family.gated_decoder_spec", family="llama"), LLAMA_FFN,
                  forward="llama", names=LLAMA_NAMES, gguf="llama", gguf_names=GGUF_LLAMA_NAMES),
    # Mistral and Mixtral have no attention biases whatever attention_bias says; Qwen2 always
    # has them on Q, K and V (and never on O).
    "mistral": Arch(read("llama_family.windowed_decoder", family="mistral", qkv_bias=False,
                         out_bias=False), LLAMA_FFN,
                    forward="llama", names=LLAMA_NAMES, quirks=frozenset({SLIDING_WINDOW})),
    "mixtral": Arch(read("moe_family.mixtral_spec"), MIXTRAL_FFN, forward="mixtral",
                    names=LLAMA_NAMES, quirks=frozenset({SLIDING_WINDOW})),
    "qwen2": Arch(read("llama_family.windowed_decoder", family="qwen2", qkv_bias=True,
                       out_bias=False), LLAMA_FFN,
                  forward="llama", names=LLAMA_NAMES, quirks=frozenset({QWEN_SLIDING_WINDOW}),
                  gguf="qwen2"),
    "gemma": Arch(read("gemma_family.gemma_spec", family="gemma"), LLAMA_FFN, forward="llama",
                  names=LLAMA_NAMES, quirks=frozenset({GEMMA_NORMS}), gguf="gemma"),
    "phi": Arch(read("gpt_family.phi_spec"), Layout({"w1": "layers.{i}.mlp.fc1",
                                                     "w2": "layers.{i}.mlp.fc2"})),
    "qwen3": Arch(read("llama_family.windowed_decoder", family="qwen3", head_dim_default=128,
                       qk_norm="head"), LLAMA_FFN,
                  forward="llama", names=LLAMA_NAMES, quirks=frozenset({QWEN_SLIDING_WINDOW}),
                  gguf="qwen3"),
    "qwen3_moe": Arch(read("moe_family.qwen3_moe_spec", family="qwen3_moe"), gguf="qwen3moe",
                      not_run="top-k weights renormalised only with norm_topk_prob"),
    "qwen2_moe": Arch(read("moe_family.qwen2_moe_spec"),
                      not_run="a gated shared expert, and top-k weights not renormalised",
                      gguf="qwen2moe"),
    "gemma2": Arch(read("gemma_family.gemma2_spec"), LLAMA_FFN, gguf="gemma2"),
    "gemma3_text": Arch(read("gemma_family.gemma3_text_spec", family="gemma3_text"), LLAMA_FFN,
                        gguf="gemma3"),
    "phi3": Arch(read("llama_family.gated_decoder_spec", family="phi3", qkv_bias=False,
                      out_bias=False),
                 Layout({"w2": "layers.{i}.mlp.down_proj"},
                        gate_up="layers.{i}.mlp.gate_up_proj"), gguf="phi3", fused_qkv=True),
    "olmo": Arch(read("llama_family.gated_decoder_spec", family="olmo", norm=H.NO_AFFINE),
                 LLAMA_FFN, gguf="olmo"),
    "olmo2": Arch(read("llama_family.gated_decoder_spec", family="olmo2", qk_norm="heads"),
                  LLAMA_FFN, gguf="olmo2"),
    "granite": Arch(read("llama_family.gated_decoder_spec", family="granite"), LLAMA_FFN,
                    gguf="granite"),
    "starcoder2": Arch(read("gpt_family.starcoder2_spec"), Layout({"w1": "layers.{i}.mlp.c_fc",
                                                                   "w2": "layers.{i}.mlp.c_proj"}),
                       gguf="starcoder2"),
    "gpt_bigcode": Arch(read("gpt_family.gpt_bigcode_spec"), Layout({"w1": "h.{i}.mlp.c_fc",
                                                                     "w2": "h.{i}.mlp.c_proj"}),
                        fused_qkv=True),
    "gptj": Arch(read("gpt_family.gptj_spec"), Layout({"w1": "h.{i}.mlp.fc_in",
                                                       "w2": "h.{i}.mlp.fc_out"})),
    "falcon": Arch(read("gpt_family.falcon_spec"), H_TO_4H_FFN, fused_qkv=True),
    "stablelm": Arch(read("gpt_family.stablelm_spec"), LLAMA_FFN),
    "bloom": Arch(read("gpt_family.bloom_spec"), H_TO_4H_FFN, fused_qkv=True),
    "mpt": Arch(read("gpt_family.mpt_spec"), Layout({"w1": "blocks.{i}.ffn.up_proj",
                                                     "w2": "blocks.{i}.ffn.down_proj"}),
                fused_qkv=True),
    "xlm-roberta": Arch(read("bert_family.bert_like_spec", family="xlm-roberta"), BERT_FFN,
                        forward="bert", names=BERT_NAMES, quirks=frozenset({PADDED_POSITIONS})),
    "electra": Arch(read("bert_family.electra_spec"), BERT_FFN, forward="electra",
                    names=BERT_NAMES),
    # encoders and seq2seq, 2025-26 (issue 40): counted, not run (no forward family)
    "modernbert": Arch(read("bert_family.modernbert_spec"), fused_qkv=True),
    "deberta-v2": Arch(read("bert_family.deberta_v2_spec"), BERT_FFN),
    "mpnet": Arch(read("bert_family.mpnet_spec"), BERT_FFN),
    "camembert": Arch(read("bert_family.bert_relative_spec", family="camembert"), BERT_FFN),
    "data2vec-text": Arch(read("bert_family.bert_relative_spec", family="data2vec-text"),
                          BERT_FFN),
    "ernie": Arch(read("bert_family.ernie_spec"), BERT_FFN),
    "ibert": Arch(read("bert_family.bert_relative_spec", family="ibert"), BERT_FFN),
    "big_bird": Arch(read("bert_family.big_bird_spec"), BERT_FFN),
    "xlm-roberta-xl": Arch(read("bert_family.bert_relative_spec", family="xlm-roberta-xl",
                                embedding_norm=False, final_norm=True, hidden_size=2560,
                                intermediate_size=10240, num_attention_heads=32,
                                num_hidden_layers=36, vocab_size=250880,
                                max_position_embeddings=514, type_vocab_size=1), BERT_FFN),
    "megatron-bert": Arch(read("bert_family.bert_relative_spec", family="megatron-bert",
                               embedding_norm=False, final_norm=True, hidden_size=1024,
                               intermediate_size=4096, num_attention_heads=16,
                               num_hidden_layers=24, vocab_size=29056), BERT_FFN),
    "roberta-prelayernorm": Arch(read("bert_family.bert_relative_spec",
                                      family="roberta-prelayernorm", final_norm=True,
                                      vocab_size=50265), BERT_FFN),
    "mra": Arch(read("bert_family.bert_relative_spec", family="mra", pooler=False,
                     position_offset=2, vocab_size=50265, type_vocab_size=1), BERT_FFN),
    "yoso": Arch(read("bert_family.yoso_spec"), BERT_FFN),
    "tapas": Arch(read("bert_family.tapas_spec"), BERT_FFN),
    "layoutlm": Arch(read("bert_family.layoutlm_spec"), BERT_FFN),
    "rembert": Arch(read("bert_family.rembert_spec"), BERT_FFN),
    "jina_embeddings_v3": Arch(read(
        "bert_family.rotary_bert_spec", family="jina_embeddings_v3", pooler=True, gated=False,
        bias=True, hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
        num_hidden_layers=24, vocab_size=250002, max_position_embeddings=8194,
        type_vocab_size=1)),
    "nomic_bert": Arch(read(
        "bert_family.rotary_bert_spec", family="nomic_bert", pooler=False, gated=True,
        bias=False, vocab_size=30528, max_position_embeddings=2048, hidden_act="silu")),
    "eurobert": Arch(read(
        "bert_family.encoder_gated_spec", family="eurobert", vocab_size=128256, hidden_size=768,
        intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)),
    "ultrabert": Arch(read(
        "bert_family.encoder_gated_spec", family="ultrabert", vocab_size=32000,
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        head_dim=128)),
    "xlm": Arch(read("bert_family.xlm_spec", family="xlm"), Layout({"w1": "ffns.{i}.lin1",
                                                                    "w2": "ffns.{i}.lin2"})),
    "flaubert": Arch(read("bert_family.xlm_spec", family="flaubert"),
                     Layout({"w1": "ffns.{i}.lin1", "w2": "ffns.{i}.lin2"})),
    "mt5": Arch(read("t5_family.t5_variant_spec", family="mt5", vocab_size=250112, d_ff=1024,
                     num_heads=6, num_layers=8, feed_forward_proj="gated-gelu"),
                T5_FFN, gated_ffn=T5_GATED_FFN),
    "umt5": Arch(read("t5_family.t5_variant_spec", family="umt5", relative_per_layer=True,
                      vocab_size=250112, d_ff=1024, num_heads=6, num_layers=8,
                      feed_forward_proj="gated-gelu"),
                 T5_FFN, gated_ffn=T5_GATED_FFN),
    "longt5": Arch(read("t5_family.t5_variant_spec", family="longt5"), T5_FFN,
                   gated_ffn=T5_GATED_FFN),
    "bart": Arch(read("bart_family.bart_like_spec", family="bart", positions="learned",
                      embedding_norm=True, final_norm=False)),
    "mbart": Arch(read("bart_family.bart_like_spec", family="mbart", positions="learned",
                       embedding_norm=True, final_norm=True)),
    "plbart": Arch(read("bart_family.bart_like_spec", family="plbart", positions="learned",
                        embedding_norm=True, final_norm=False, d_model=768, encoder_layers=6,
                        decoder_layers=6, encoder_attention_heads=12,
                        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                        vocab_size=50005)),
    "pegasus": Arch(read("bart_family.bart_like_spec", family="pegasus", positions="sinusoidal",
                         embedding_norm=False, final_norm=True)),
    "m2m_100": Arch(read("bart_family.bart_like_spec", family="m2m_100", positions="buffer",
                         embedding_norm=False, final_norm=True, vocab_size=128112,
                         activation_function="relu")),
    "blenderbot": Arch(read("bart_family.bart_like_spec", family="blenderbot",
                            positions="learned0", embedding_norm=False, final_norm=True,
                            d_model=2560, encoder_layers=2, decoder_layers=24,
                            encoder_attention_heads=32, decoder_attention_heads=32,
                            encoder_ffn_dim=10240, decoder_ffn_dim=10240, vocab_size=8008,
                            max_position_embeddings=128)),
    "blenderbot-small": Arch(read("bart_family.bart_like_spec", family="blenderbot-small",
                                  positions="learned0", embedding_norm=True, final_norm=False,
                                  d_model=512, encoder_layers=8, decoder_layers=8,
                                  encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                                  max_position_embeddings=512)),
    "marian": Arch(read("bart_family.marian_spec")),
    "mvp": Arch(read("bart_family.mvp_spec")),
    "bigbird_pegasus": Arch(read("bart_family.bigbird_pegasus_spec")),
    "seamless_m4t": Arch(read("bart_family.seamless_text_spec", family="seamless_m4t")),
    "seamless_m4t_v2": Arch(read("bart_family.seamless_text_spec", family="seamless_m4t_v2")),
    "cohere": Arch(read("llama_family.cohere_spec"), LLAMA_FFN),
    "deepseek_v3": Arch(read("moe_family.deepseek_v3_spec"),
                        not_run="shared experts, dense first layers and grouped sigmoid "
                                "routing", gguf="deepseek2"),
    # 2025-26 decoders
    "gemma3": Arch(multimodal("gemma3_text")),
    "glm4_moe": Arch(read("moe_family.glm4_moe_spec"), not_run="shared experts, a dense first "
                     "layer and grouped sigmoid routing", gguf="glm4moe"),
    "llama4_text": Arch(read("moe_family.llama4_text_spec"),
                        not_run="a shared expert and sigmoid routing", gguf="llama4"),
    "llama4": Arch(multimodal("llama4_text")),
    "qwen3_next": Arch(read("ssm_family.qwen3_next_spec"), not_run="a gated shared expert",
                       gguf="qwen3next"),
    "qwen3_5_text": Arch(read("ssm_family.qwen3_next_spec", family="qwen3_5_text", moe=False),
                         gguf="qwen35"),
    "qwen3_5_moe_text": Arch(read("ssm_family.qwen3_next_spec", family="qwen3_5_moe_text"),
                             not_run="a gated shared expert", gguf="qwen35moe"),
    "qwen3_5": Arch(multimodal("qwen3_5_text")),
    "qwen3_5_moe": Arch(multimodal("qwen3_5_moe_text")),
    # LLaMA's shape with a twist: biases, norms, per-layer windows
    "exaone": Arch(read("llama_family.gated_decoder_spec", family="exaone"),
                   LLAMA_FFN, gguf="exaone"),  # built as LlamaForCausalLM
    "internlm3": Arch(read("llama_family.gated_decoder_spec", family="internlm3"), LLAMA_FFN),
    "iquestcoder": Arch(read("llama_family.gated_decoder_spec", family="iquestcoder"),
                        LLAMA_FFN),
    "cwm": Arch(read("llama_family.patterned", family="cwm", qkv_bias=False, out_bias=False),
                LLAMA_FFN),
    "ministral3": Arch(read("llama_family.patterned", family="ministral3", qkv_bias=False,
                            out_bias=False), LLAMA_FFN),
    "helium": Arch(read("llama_family.patterned", family="helium", qkv_bias=None,
                        out_bias=False), LLAMA_FFN),
    "glm": Arch(read("llama_family.patterned", family="glm", out_bias=False)),
    "seed_oss": Arch(read("llama_family.seed_oss_spec"), LLAMA_FFN, gguf="seed_oss"),
    "ernie4_5": Arch(read("llama_family.ernie4_5_spec"), LLAMA_FFN, gguf="ernie4_5"),
    "exaone4": Arch(read("llama_family.patterned", family="exaone4", qkv_bias=False,
                         out_bias=False, qk_norm="head"), LLAMA_FFN),
    "olmo3": Arch(read("llama_family.patterned", family="olmo3", qk_norm="heads"), LLAMA_FFN),
    "hyperclovax": Arch(read("llama_family.patterned", family="hyperclovax",
                             norm=H.GEMMA2_NORM), LLAMA_FFN),
    "vaultgemma": Arch(read("gemma_family.patterned_gemma", family="vaultgemma"), LLAMA_FFN),
    "granitemoe": Arch(read("moe_family.granitemoe_spec", family="granitemoe"),
                       not_run="fused gate and up experts", gguf="granitemoe"),
    "granitemoeshared": Arch(read("moe_family.granitemoe_spec", family="granitemoeshared"),
                             not_run="a shared expert"),
    "mellum": Arch(read("moe_family.qwen3_moe_spec", family="mellum"),
                   not_run="top-k weights renormalised only with norm_topk_prob"),
    "param2moe": Arch(read("moe_family.glm4_moe_spec", family="param2moe"),
                      not_run="shared experts"),
    "sarvam_moe": Arch(read("moe_family.glm4_moe_spec", family="sarvam_moe"),
                       not_run="shared experts"),
    "olmoe": Arch(read("moe_family.routed_decoder", family="olmoe", qk_norm="heads",
                       experts_key="num_experts", top_k=8, experts=64),
                  not_run="top-k weights not renormalised", gguf="olmoe"),
    "flex_olmo": Arch(read("moe_family.routed_decoder", family="flex_olmo", qk_norm="heads",
                           experts_key="num_experts", top_k=5, experts=7),
                      not_run="top-k weights not renormalised"),
    "phimoe": Arch(read("moe_family.phimoe_spec"), not_run="sparsemixer routing", gguf="phimoe"),
    "glm4": Arch(read("llama_family.gated_decoder_spec", family="glm4", out_bias=False,
                      norm=H.GEMMA2_NORM), gguf="glm4"),
    "cohere2": Arch(read("llama_family.patterned", family="cohere2", tie_default=True,
                         norm=H.COHERE_NORM), LLAMA_FFN, gguf="cohere2"),
    "cohere2_moe": Arch(read("moe_family.cohere2_moe_spec"), not_run="a mixture of experts"),
    "granite_swa": Arch(read("llama_family.granite_swa_spec"), LLAMA_FFN),
    "granitemoe_swa": Arch(read("moe_family.granitemoe_swa_spec"), not_run="attention sinks"),
    "lfm2": Arch(read("llama_family.lfm2_spec")),
    "gemma3n_text": Arch(read("gemma_family.gemma3n_text_spec"),
                         not_run="AltUp, LAuReL and per-layer inputs", gguf="gemma3n"),
    "ernie4_5_moe": Arch(read("moe_family.ernie4_5_moe_spec"),
                         not_run="shared experts and biased routing"),
    "afmoe": Arch(read("moe_family.afmoe_spec"), not_run="shared experts and biased routing"),
    # state-space mixers
    "mamba": Arch(read("ssm_family.mamba_spec", family="mamba")),
    "falcon_mamba": Arch(read("ssm_family.mamba_spec", family="falcon_mamba")),
    "mamba2": Arch(read("ssm_family.mamba2_spec")),
    "jamba": Arch(read("ssm_family.jamba_spec"), not_run="Mamba layers and a mixture of experts"),
    "sarvam_mla": Arch(read("moe_family.deepseek_v3_spec", family="sarvam_mla"),
                       not_run="shared experts and latent attention"),
    "deepseek_v2": Arch(read("moe_family.deepseek_v3_spec", family="deepseek_v2"),
                        not_run="shared experts and latent attention"),
    "minimax_m2": Arch(read("moe_family.minimax_m2_spec"), not_run="sigmoid routing with a "
                       "score-correction bias", gguf="minimax-m2"),
    "smollm3": Arch(read("llama_family.patterned", family="smollm3"), LLAMA_FFN, gguf="smollm3"),
    "gpt_oss": Arch(read("moe_family.gpt_oss_spec"), not_run="experts with clamped SwiGLU "
                    "(alpha 1.702, limit 7) and biases", gguf="gpt-oss"),
    # latent-attention variants (issue 40, readers/latent.py)
    "minicpm3": Arch(read("latent.dense_latent_spec", family="minicpm3"), LLAMA_FFN,
                     gguf="minicpm3"),
    "youtu": Arch(read("latent.dense_latent_spec", family="youtu"), LLAMA_FFN),
    "glm4_moe_lite": Arch(read("latent.latent_moe_spec", family="glm4_moe_lite"),
                          not_run="shared experts, a dense first layer and grouped sigmoid "
                          "routing"),
    "axk1": Arch(read("latent.latent_moe_spec", family="axk1", post_moe_norm=True),
                 not_run="shared experts and a norm on the mixture's output"),
    "deepseek_v32": Arch(read("latent.latent_moe_spec", family="deepseek_v32", dense_first=3,
                              indexer=True),
                         not_run="shared experts, dense first layers and grouped sigmoid routing"),
    "glm_moe_dsa": Arch(read("latent.latent_moe_spec", family="glm_moe_dsa", dense_first=3,
                             indexer=True),
                        not_run="shared experts, dense first layers and grouped sigmoid routing"),
    "longcat_flash": Arch(read("latent.longcat_flash_spec"),
                          not_run="zero (identity) experts and a shortcut mixture of experts"),
    "dots3_note_text": Arch(read("latent.dots3_note_text_spec"),
                            not_run="shared experts and grouped sigmoid routing"),
    "axk2": Arch(read("latent.latent_moe_spec", family="axk2", indexer=True, gated=True),
                 not_run="shared experts, gated norms and an output gate"),
    "hy_v4": Arch(read("latent.latent_moe_spec", family="hy_v4", indexer=True, hyper=True),
                  not_run="hyper-connections, attention sinks and clamped SwiGLU experts"),
    # encoders and seq2seq of issue 40 (readers/encoders.py, readers/seq2seq.py)
    "albert": Arch(read("encoders.albert_spec")),
    "deberta": Arch(read("encoders.deberta_spec"), BERT_FFN),
    "roformer": Arch(read("encoders.roformer_spec"), BERT_FFN),
    "longformer": Arch(read("encoders.longformer_spec"), BERT_FFN),
    "gte": Arch(read("encoders.gte_spec"), not_run="a bias on the down projection alone"),
    "bert-generation": Arch(read("encoders.bert_decoder_spec"), BERT_FFN),
    "xmod": Arch(read("encoders.xmod_spec"), not_run="language adapters after the FFN"),
    "convbert": Arch(read("encoders.convbert_spec"), BERT_FFN),
    "funnel": Arch(read("encoders.funnel_spec")),
    "mobilebert": Arch(read("encoders.mobilebert_spec"),
                       not_run="FFNs in sequence in each layer"),
    "fnet": Arch(read("encoders.fnet_spec"), BERT_FFN),
    "esmc": Arch(read("encoders.esmc_spec")),
    "luke": Arch(read("encoders.luke_spec"), BERT_FFN),
    "roc_bert": Arch(read("encoders.roc_bert_spec"), BERT_FFN),
    "nystromformer": Arch(read("encoders.nystromformer_spec"), BERT_FFN),
    "reformer": Arch(read("encoders.reformer_spec")),
    "perceiver": Arch(read("encoders.perceiver_spec")),
    "squeezebert": Arch(read("encoders.squeezebert_spec"),
                        not_run="projections as grouped 1x1 convolutions"),
    "led": Arch(read("seq2seq.led_spec")),
    "switch_transformers": Arch(read("seq2seq.switch_transformers_spec"),
                                not_run="a mixture of experts in some layers"),
    "nllb-moe": Arch(read("seq2seq.nllb_moe_spec"),
                     not_run="a mixture of experts in some layers"),
    "t5gemma": Arch(read("seq2seq.t5gemma_spec")),
    "t5gemma2": Arch(read("seq2seq.t5gemma2_spec")),
    "trocr": Arch(read("seq2seq.trocr_spec")),
    "fsmt": Arch(read("seq2seq.fsmt_spec")),
    "pegasus_x": Arch(read("seq2seq.pegasus_x_spec")),
    "prophetnet": Arch(read("seq2seq.prophetnet_spec")),
    "encoder-decoder": Arch(read("seq2seq.encoder_decoder_spec")),
    # hybrid: state-space, linear-attention, short-convolution and recurrent hybrids (issue 40)
    "falcon_h1": Arch(read("hybrid.falcon_h1_spec"), not_run="Mamba-2 beside attention"),
    "nemotron_h": Arch(read("hybrid.nemotron_h_spec"), not_run="Mamba-2 layers and squared-ReLU "
                       "experts"),
    "granitemoehybrid": Arch(read("hybrid.granitemoehybrid_spec"), not_run="Mamba-2 layers and "
                             "a mixture of experts"),
    "bamba": Arch(read("hybrid.bamba_spec"), not_run="Mamba-2 layers"),
    "olmo_hybrid": Arch(read("hybrid.olmo_hybrid_spec")),
    "zamba2": Arch(read("hybrid.zamba2_spec"), not_run="Mamba-2 layers and a shared block"),
    "zamba": Arch(read("hybrid.zamba_spec"), not_run="Mamba layers and a shared block"),
    "kimi_linear": Arch(read("hybrid.kimi_linear_spec"), not_run="shared experts and grouped "
                        "sigmoid routing"),
    "lfm3": Arch(read("hybrid.lfm3_spec")),
    "lara_mini": Arch(read("hybrid.lara_mini_spec"), not_run="a shared expert"),
    "bailing_hybrid": Arch(read("hybrid.bailing_hybrid_spec"), not_run="shared experts and "
                           "grouped sigmoid routing"),
    "recurrent_gemma": Arch(read("hybrid_recurrent.recurrent_gemma_spec")),
    "xlstm": Arch(read("hybrid_recurrent.xlstm_spec")),
    "rwkv": Arch(read("hybrid_recurrent.rwkv_spec"),
                 not_run="RWKV's channel mixing (receptance and token shift)"),
    "nemo_speechlm": Arch(read("hybrid.speech_lm_spec", text_type="nemotron_h",
                               parts=("word_timestamp_config",)),
                          not_run="Mamba-2 layers and squared-ReLU experts"),
    "vibevoice_asr": Arch(read("hybrid.speech_lm_spec", text_type="qwen2",
                               parts=("acoustic_tokenizer_encoder_config",
                                      "semantic_tokenizer_encoder_config"))),
    "inkling_text": Arch(read("hybrid.inkling_text_spec"), not_run="a router over the shared "
                         "experts too"),
    # new kinds of mixture of experts (issue 40, readers/moe.py)
    "solar_open": Arch(read("moe.moe_spec", family="solar_open", experts_key="n_routed_experts",
                            top_k_default=8, shared_count=("n_shared_experts", 1),
                            first_key=None, out_bias=False),
                       not_run="shared experts and grouped sigmoid routing"),
    "aria_text": Arch(read("moe.moe_spec", family="aria_text", experts_key="moe_num_experts",
                           d_ff_key="intermediate_size", top_k_key="moe_topk", top_k_default=2,
                           shared_count=("moe_num_shared_experts", 2), first_key=None,
                           shared_mlp_bias=True),
                      not_run="shared experts"),
    "exaone_moe": Arch(read("moe.moe_spec", family="exaone_moe",
                            shared_count=("num_shared_experts", 1), first_default=1,
                            qk_norm="head", qkv_bias=False, out_bias=False),
                       not_run="shared experts, a dense first layer and grouped sigmoid routing"),
    "hy_v3": Arch(read("moe.moe_spec", family="hy_v3", shared_count=("num_shared_experts", 1),
                       first_key=None, first_default=1, qk_norm="head", shared_mlp_bias=True),
                  not_run="shared experts, a dense first layer and sigmoid routing"),
    "minicpm5_moe": Arch(read("moe.moe_spec", family="minicpm5_moe",
                              experts_key="n_routed_experts",
                              shared_count=("n_shared_experts", 1), first_default=1,
                              output_gate=True),
                         not_run="shared experts, a dense first layer and grouped sigmoid "
                                 "routing"),
    "kolibri1": Arch(read("moe.moe_spec", family="kolibri1", experts_key="num_local_experts",
                          shared_width="shared_expert_intermediate_size", first_key=None,
                          qk_norm="head", norm=H.GEMMA2_NORM, qkv_bias=False, out_bias=False),
                     not_run="shared experts and sigmoid routing"),
    "mimo_v2_flash": Arch(read("moe.moe_spec", family="mimo_v2_flash",
                               experts_key="n_routed_experts", first_default=1, out_bias=False,
                               head_dim_default=192, v_head_dim=128, sliding_kv_times=2,
                               sinks="sliding"),
                          not_run="a dense first layer, sinks and grouped sigmoid routing"),
    "flint": Arch(read("moe.moe_spec", family="flint", only_layers=(0, 1),
                       shared_width="shared_expert_intermediate_size", qk_norm="head",
                       sinks="all"),
                  not_run="a shared expert, dense first layers and sinks"),
    "laguna": Arch(read("moe.laguna_spec"), not_run="a shared expert, a dense first layer, "
                   "biased routing and gated heads"),
    "beam": Arch(read("moe.moe_spec", family="beam", first_default=3, first_key=None,
                      qk_norm="head", norm=H.GEMMA2_NORM, output_gate=True, gate_bias=True,
                      unbiased_gate=True),
                 not_run="dense first layers and grouped sigmoid routing"),
    "minimax_m3_vl_text": Arch(read("moe.minimax_m3_text_spec"),
                               not_run="a shared expert, clamped SwiGLU and biased routing"),
    "kolibri1_1": Arch(read("moe.kolibri1_1_spec"), not_run="shared experts, dense first "
                       "layers, sigmoid routing and indexed attention"),
    "minimax": Arch(read("moe.minimax_spec"), not_run="lightning attention"),
    "ergo": Arch(read("moe.ergo_spec"), not_run="squared-ReLU experts, each with a norm"),
    # older and odd decoders, Gemma 4 (issue 40: readers/classic.py, readers/gemma4.py)
    "gemma4_text": Arch(read("gemma4.gemma4_text_spec"), LLAMA_FFN),
    "gemma4_unified_text": Arch(read("gemma4.gemma4_text_spec", family="gemma4_unified_text",
                                     per_layer_default=0), LLAMA_FFN),
    "gemma4": Arch(multimodal("gemma4_text")),
    "gemma4_unified": Arch(multimodal("gemma4_unified_text")),
    "apertus": Arch(read("classic.up_down_spec", family="apertus", qk_norm="head"),
                    not_run="xIELU"),
    "apertus1p5_text": Arch(read("classic.up_down_spec", family="apertus1p5_text",
                                 qk_norm="head"), not_run="xIELU"),
    "arcee": Arch(read("classic.up_down_spec", family="arcee"), not_run="squared ReLU"),
    "bitnet": Arch(read("classic.bitnet_spec"), not_run="squared ReLU and sub-norms"),
    "jais2": Arch(read("classic.up_down_spec", family="jais2",
                       norm=NormSpec(kind="layernorm", bias=True, final=True)),
                  not_run="squared ReLU"),
    "nanochat": Arch(read("classic.up_down_spec", family="nanochat", norm=NormSpec(
        kind="rmsnorm", bias=False, final=True, affine=False)), not_run="squared ReLU"),
    "persimmon": Arch(read("classic.persimmon_spec"), not_run="squared ReLU"),
    "fuyu": Arch(read("classic.fuyu_spec")),
    "gpt_neo": Arch(read("classic.gpt_neo_spec"), Layout({"w1": "h.{i}.mlp.c_fc",
                                                         "w2": "h.{i}.mlp.c_proj"})),
    "codegen": Arch(read("classic.codegen_spec"), Layout({"w1": "h.{i}.mlp.fc_in",
                                                         "w2": "h.{i}.mlp.fc_out"})),
    "openai-gpt": Arch(read("classic.openai_gpt_spec"),
                       Layout({"w1": "h.{i}.mlp.c_fc", "w2": "h.{i}.mlp.c_proj"}, linear=False)),
    "gpt-sw3": Arch(read("gpt_family.gpt2_spec"),
                    Layout({"w1": "h.{i}.mlp.c_fc", "w2": "h.{i}.mlp.c_proj"}, linear=False)),
    "xglm": Arch(read("classic.xglm_spec"), Layout({"w1": "layers.{i}.fc1",
                                                   "w2": "layers.{i}.fc2"})),
    "biogpt": Arch(read("classic.biogpt_spec"), Layout({"w1": "layers.{i}.fc1",
                                                       "w2": "layers.{i}.fc2"})),
    "ctrl": Arch(read("classic.ctrl_spec"), Layout({"w1": "h.{i}.ffn.0", "w2": "h.{i}.ffn.2"})),
    "gpt_neox_japanese": Arch(read("classic.gpt_neox_japanese_spec"),
                              Layout({"w1": "layers.{i}.mlp.dense_h_to_4h",
                                      "w2": "layers.{i}.mlp.dense_4h_to_h"})),
    "diffllama": Arch(read("classic.diffllama_spec"), LLAMA_FFN),
    "modernbert-decoder": Arch(read("classic.modernbert_decoder_spec")),
    "gemma4_unified_assistant": Arch(read("gemma4.gemma4_unified_assistant_spec")),
    "doge": Arch(read("classic.doge_spec"), LLAMA_FFN),
    "xlnet": Arch(read("classic.xlnet_spec"), Layout({"w1": "layer.{i}.ff.layer_1",
                                                     "w2": "layer.{i}.ff.layer_2"})),
}

SUPPORTED_MODEL_TYPES = tuple(ARCHS)
GGUF_ARCHITECTURES = {row.gguf: model_type for model_type, row in ARCHS.items() if row.gguf}


def ffn_layout(spec: ModelSpec) -> Layout | None:
    """Where a checkpoint of the spec's family keeps a layer's FFN (None: not known). A spec's
    family is its config's model_type, except that BERT's relatives read as ``bert``; a
    preset's family may name no row (``transformer``: random weights only)."""
    row = ARCHS.get(spec.family)
    if row is None:
        return None
    return row.gated_ffn if spec.ffn.gated and row.gated_ffn is not None else row.ffn


def with_ffn_layout() -> list[str]:
    """The model types whose FFN ffncli reads from a checkpoint."""
    return [t for t, row in ARCHS.items() if row.ffn is not None]


def fused(spec: ModelSpec) -> frozenset[str]:
    """The projections the spec's family stores as one matrix: ``qkv`` (GPT-2's c_attn),
    ``gate_up`` (Phi-3's gate_up_proj). A LoRA adapter sees each as one linear layer."""
    row = ARCHS.get(spec.family)
    if row is None:
        return frozenset()
    layout = ffn_layout(spec)
    return frozenset({"qkv"} if row.fused_qkv else set()) | frozenset(
        {"gate_up"} if layout is not None and layout.gate_up else set())


def not_run(spec: ModelSpec) -> str | None:
    """Why the engine refuses the spec's FFN, or None."""
    row = ARCHS.get(spec.family)
    return row.not_run if row is not None else None


# ---------------------------------------------------------------------------------------------
# config.json -> spec.


class UnsupportedModelType(ConfigError):
    """A config.json of an architecture no reader knows (``params --weights`` can still count
    the file by tensor names)."""


def _same_type(name: str) -> str:
    """A supported model_type spelled differently (case, '-' or '_'), else ''. Nothing looser:
    a near miss such as qwen3 for qwen2 is another architecture, counted wrongly."""
    def key(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "").strip()

    hits = [t for t in SUPPORTED_MODEL_TYPES if key(t) == key(name)]
    return f" (did you mean {hits[0]!r}?)" if hits else ""


def spec_from_config(data: Any, source: str) -> ModelSpec:
    """A config.json's document as a spec, by its model_type's reader."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError(f"{source}: missing key 'model_type'; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if not isinstance(model_type, str):
        raise ConfigError(f"{source}: key 'model_type': expected a string such as 'llama', got "
                          f"{brief(model_type)}")
    row = ARCHS.get(model_type)
    if row is None and model_type in LACKS:
        raise UnsupportedModelType(f"{source}: unsupported model_type {brief(model_type)}: "
                                   f"ffncli lacks {LACKS[model_type]}")
    if row is None:
        raise UnsupportedModelType(
            f"{source}: unsupported model_type {brief(model_type)}"
            f"{_same_type(model_type)}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return check_spec(row.reader(Config(data, source)), source)


# The sub-configs of a multimodal config that are not its language model.
TOWERS = ("vision_config", "audio_config", "speech_config", "vision_encoder_config",
          "audio_encoder_config")


def _multimodal(c: Config, text_type: str) -> ModelSpec:
    """A multimodal config: its language model (``text_config``, read as ``text_type``)
    counted with its FFN breakdown; its towers named as not counted."""
    text = c.mapping("text_config") or {}
    tie = {"tie_word_embeddings": c.data["tie_word_embeddings"]} \
        if "tie_word_embeddings" in c.data and "tie_word_embeddings" not in text else {}
    data = {**text, **tie, "model_type": text_type}
    spec = ARCHS[text_type].reader(Config(data, f"{c.source}: text_config"))
    towers = tuple(f"{key.removesuffix('_config').replace('_', ' ')} tower ({kind})"
                   for key in TOWERS if isinstance(c.data.get(key), dict)
                   for kind in [str(c.data[key].get("model_type", "?"))[:40]])
    joins = ("what joins them to the language model",) if towers else ()
    return replace(spec, name=c.name(text_type), uncounted=towers + joins)


def load_config(path: Path) -> ModelSpec:
    """A config.json (:func:`ffncli.specs.hfconfig.read_config`), then
    :func:`spec_from_config`."""
    return spec_from_config(read_config(path), str(path))
