"""Where each family keeps its tensors in a checkpoint: a layer's FFN (:class:`Layout`), the
other tensors the whole-model forward reads, and the ways a model differs from its forward
family. The table of architectures (:mod:`ffncli.specs.table`) names them per model type.
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.base import record


@record
class Layout:
    """Where one family keeps a layer's FFN: tensor names (with {i} the layer, {e} an expert)
    and whether matrices are nn.Linear ([out, in], transposed on load) or Conv1D ([in, out])."""

    names: dict[str, str]  # our name (w1, w2 or w, v, w2) -> checkpoint name stem
    linear: bool = True
    router: str | None = None  # mixture of experts: router stem; names then hold {e}
    gate_up: str | None = None  # Phi-3: one [2 d_ff, d_model] matrix, gate rows then up rows
    stacked: bool = False  # GGUF: every expert in one tensor [experts, out, in], no biases
    # transformers 5's experts as it holds them, when a checkpoint has them so: "gate_up" ->
    # [experts, 2 d_ff, d_model] (gate rows, then up rows), "w2" -> [experts, d_model, d_ff]
    fused: dict[str, str] | None = None
    # the fused stacks [experts, in, out] instead (gpt-oss, Llama 4), gate and up columns
    # alternating (gpt-oss) rather than halves; biases, where stored, beside them ("<stem>_bias")
    fused_in_out: bool = False
    fused_interleaved: bool = False
    shared: dict[str, str] | None = None  # the shared experts, one FFN: w, v, w2 stems
    shared_gate: str | None = None  # Qwen2-MoE: sigmoid(x g) on the shared output, g [1, d_model]
    dense: Layout | None = None  # a mixture's dense layers (Qwen's mlp_only_layers, DeepSeek's)
    choice_bias: str | None = None  # DeepSeek-V3's score-correction bias, added to choose


# ---------------------------------------------------------------------------------------------
# Where the FFN is.

BERT_FFN = Layout({"w1": "layer.{i}.intermediate.dense", "w2": "layer.{i}.output.dense"})
LLAMA_FFN = Layout({"w": "layers.{i}.mlp.gate_proj", "v": "layers.{i}.mlp.up_proj",
                    "w2": "layers.{i}.mlp.down_proj"})
H_TO_4H_FFN = Layout({"w1": "h.{i}.mlp.dense_h_to_4h", "w2": "h.{i}.mlp.dense_4h_to_h"})
MIXTRAL_FFN = Layout({"w": "layers.{i}.block_sparse_moe.experts.{e}.w1",
                      "v": "layers.{i}.block_sparse_moe.experts.{e}.w3",
                      "w2": "layers.{i}.block_sparse_moe.experts.{e}.w2"},
                     router="layers.{i}.block_sparse_moe.gate")
# Qwen2-MoE, Qwen3-MoE and OLMoE: experts under mlp.experts (or fused, as transformers 5 holds
# them), the router mlp.gate; Qwen2-MoE's shared expert behind mlp.shared_expert_gate; dense
# layers (mlp_only_layers) LLaMA's.
QWEN_MOE_FFN = Layout({"w": "layers.{i}.mlp.experts.{e}.gate_proj",
                       "v": "layers.{i}.mlp.experts.{e}.up_proj",
                       "w2": "layers.{i}.mlp.experts.{e}.down_proj"},
                      router="layers.{i}.mlp.gate",
                      fused={"gate_up": "layers.{i}.mlp.experts.gate_up_proj",
                             "w2": "layers.{i}.mlp.experts.down_proj"},
                      shared={"w": "layers.{i}.mlp.shared_expert.gate_proj",
                              "v": "layers.{i}.mlp.shared_expert.up_proj",
                              "w2": "layers.{i}.mlp.shared_expert.down_proj"},
                      shared_gate="layers.{i}.mlp.shared_expert_gate", dense=LLAMA_FFN)
T5_FFN = Layout({"w1": "encoder.block.{i}.layer.1.DenseReluDense.wi",
                 "w2": "encoder.block.{i}.layer.1.DenseReluDense.wo"})
T5_GATED_FFN = Layout({"w": "encoder.block.{i}.layer.1.DenseReluDense.wi_0",
                       "v": "encoder.block.{i}.layer.1.DenseReluDense.wi_1",
                       "w2": "encoder.block.{i}.layer.1.DenseReluDense.wo"})

# llama.cpp names a layer's FFN alike in every architecture: gate, up and down, a router
# (ffn_gate_inp) and the experts' stacks (ffn_*_exps).
GGUF_FFN = Layout({"w1": "blk.{i}.ffn_up", "w2": "blk.{i}.ffn_down"})
GGUF_GATED_FFN = Layout({"w": "blk.{i}.ffn_gate", "v": "blk.{i}.ffn_up", "w2": "blk.{i}.ffn_down"})
GGUF_MOE_FFN = Layout({"w": "blk.{i}.ffn_gate_exps", "v": "blk.{i}.ffn_up_exps",
                       "w2": "blk.{i}.ffn_down_exps"}, router="blk.{i}.ffn_gate_inp",
                      stacked=True)

# ---------------------------------------------------------------------------------------------
# The other tensors of the models the forward runs ({i}: the layer).

BERT_NAMES = {"word": "embeddings.word_embeddings.weight",
              "position": "embeddings.position_embeddings.weight",
              "type": "embeddings.token_type_embeddings.weight",
              "norm": "embeddings.LayerNorm",
              "q": "layer.{i}.attention.self.query", "k": "layer.{i}.attention.self.key",
              "v": "layer.{i}.attention.self.value", "o": "layer.{i}.attention.output.dense",
              "norm1": "layer.{i}.attention.output.LayerNorm",
              "norm2": "layer.{i}.output.LayerNorm"}
DISTILBERT_NAMES = {**BERT_NAMES,
                    "q": "layer.{i}.attention.q_lin", "k": "layer.{i}.attention.k_lin",
                    "v": "layer.{i}.attention.v_lin", "o": "layer.{i}.attention.out_lin",
                    "norm1": "layer.{i}.sa_layer_norm", "norm2": "layer.{i}.output_layer_norm"}
GPT2_NAMES = {"word": "wte.weight", "position": "wpe.weight", "norm": "ln_f",
              "head": "lm_head.weight", "qkv": "h.{i}.attn.c_attn", "o": "h.{i}.attn.c_proj",
              "norm1": "h.{i}.ln_1", "norm2": "h.{i}.ln_2"}
LLAMA_NAMES = {"embed": "embed_tokens.weight", "norm": "norm.weight", "head": "lm_head.weight",
               "attn_norm": "layers.{i}.input_layernorm.weight",
               "ffn_norm": "layers.{i}.post_attention_layernorm.weight",
               "q": "layers.{i}.self_attn.q_proj", "k": "layers.{i}.self_attn.k_proj",
               "v": "layers.{i}.self_attn.v_proj", "o": "layers.{i}.self_attn.o_proj",
               "q_norm": "layers.{i}.self_attn.q_norm.weight",
               "k_norm": "layers.{i}.self_attn.k_norm.weight"}
GGUF_LLAMA_NAMES = {"embed": "token_embd.weight", "norm": "output_norm.weight",
                    "head": "output.weight",
                    "attn_norm": "blk.{i}.attn_norm.weight", "ffn_norm": "blk.{i}.ffn_norm.weight",
                    "q": "blk.{i}.attn_q", "k": "blk.{i}.attn_k", "v": "blk.{i}.attn_v",
                    "o": "blk.{i}.attn_output", "q_norm": "blk.{i}.attn_q_norm.weight",
                    "k_norm": "blk.{i}.attn_k_norm.weight"}

# GGUF files: the architectures whose Q and K rows llama.cpp's converter reorders (rotated
# pairs as neighbours), and the config keys an architecture fixes where a config.json would
# say them (llama.cpp's qwen3moe always renormalises the top-k weights, qwen2moe and olmoe
# never).
GGUF_PERMUTED = frozenset({"llama"})
GGUF_FIXED_KEYS: dict[str, dict[str, object]] = {"qwen3moe": {"norm_topk_prob": True},
                                                 "qwen2moe": {"norm_topk_prob": False},
                                                 "olmoe": {"norm_topk_prob": False}}

# DeepSeek-V2/V3 and GLM-4.5: Qwen's experts and router (mlp.experts,
# one matrix each or fused; mlp.gate) with the score-correction bias beside the router (V3,
# GLM-4.5), the shared experts (n_shared_experts of them, one FFN) mlp.shared_experts without
# a gate, dense layers (first_k_dense_replace) LLaMA's. MLA's tensors: queries through
# q_a_proj, q_a_layernorm and q_b_proj (q_proj when q_lora_rank is null), the latent and the
# shared rotated key from kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj.
DEEPSEEK_FFN = replace(QWEN_MOE_FFN, shared={"w": "layers.{i}.mlp.shared_experts.gate_proj",
                                              "v": "layers.{i}.mlp.shared_experts.up_proj",
                                              "w2": "layers.{i}.mlp.shared_experts.down_proj"},
                       shared_gate=None,
                       choice_bias="layers.{i}.mlp.gate.e_score_correction_bias")
DEEPSEEK_V2_FFN = replace(DEEPSEEK_FFN, choice_bias=None)  # a softmax router, no bias
# The main model's embeddings and final norm named in full: the multi-token-prediction layer
# (DeepSeek-V3's model.layers.61, GLM-4.5's last; not run) holds an embed_tokens and a
# shared_head.norm of its own, which the short names would match as well.
GLM4_MOE_NAMES = {**LLAMA_NAMES, "embed": "model.embed_tokens.weight",
                  "norm": "model.norm.weight"}
MLA_NAMES = {**GLM4_MOE_NAMES, "q_a": "layers.{i}.self_attn.q_a_proj",
             "q_a_norm": "layers.{i}.self_attn.q_a_layernorm.weight",
             "q_b": "layers.{i}.self_attn.q_b_proj",
             "kv_a": "layers.{i}.self_attn.kv_a_proj_with_mqa",
             "kv_a_norm": "layers.{i}.self_attn.kv_a_layernorm.weight",
             "kv_b": "layers.{i}.self_attn.kv_b_proj"}

# The ways a model differs from its forward family.
PADDED_POSITIONS = "positions after the padding index"  # RoBERTa
GEMMA_NORMS = "embeddings scaled by sqrt(d_model), norms by (1 + weight)"
SLIDING_WINDOW = "a sliding window when the config sets one"  # Mistral, Mixtral
QWEN_SLIDING_WINDOW = "sliding windows on the layers use_sliding_window names"  # Qwen2, Qwen3

# gpt-oss: experts fused [experts, in, out] with gate and up columns alternating and biases,
# a router with a bias (mlp.router). Llama 4's text model: under feed_forward, the experts
# fused [experts, in, out] (gate half, up half), the router, one shared expert; dense layers
# (off interleave_moe_layer_step) LLaMA's gated FFN.
GPT_OSS_FFN = Layout({"w": "layers.{i}.mlp.experts.{e}.gate_proj",
                      "v": "layers.{i}.mlp.experts.{e}.up_proj",
                      "w2": "layers.{i}.mlp.experts.{e}.down_proj"},
                     router="layers.{i}.mlp.router",
                     fused={"gate_up": "layers.{i}.mlp.experts.gate_up_proj",
                            "w2": "layers.{i}.mlp.experts.down_proj"},
                     fused_in_out=True, fused_interleaved=True)
LLAMA4_FFN = Layout({"w": "layers.{i}.feed_forward.experts.{e}.gate_proj",
                     "v": "layers.{i}.feed_forward.experts.{e}.up_proj",
                     "w2": "layers.{i}.feed_forward.experts.{e}.down_proj"},
                    router="layers.{i}.feed_forward.router",
                    fused={"gate_up": "layers.{i}.feed_forward.experts.gate_up_proj",
                           "w2": "layers.{i}.feed_forward.experts.down_proj"},
                    fused_in_out=True,
                    shared={"w": "layers.{i}.feed_forward.shared_expert.gate_proj",
                            "v": "layers.{i}.feed_forward.shared_expert.up_proj",
                            "w2": "layers.{i}.feed_forward.shared_expert.down_proj"},
                    dense=Layout({"w": "layers.{i}.feed_forward.gate_proj",
                                  "v": "layers.{i}.feed_forward.up_proj",
                                  "w2": "layers.{i}.feed_forward.down_proj"}))
GPT_OSS_NAMES = {**LLAMA_NAMES, "sinks": "layers.{i}.self_attn.sinks"}
