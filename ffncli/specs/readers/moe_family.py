"""Decoders whose FFN is a mixture of experts: Mixtral, Qwen2-MoE and Qwen3-MoE, DeepSeek-V2 and
V3, GLM-4.5, Llama 4, MiniMax-M2, Granite-MoE, OLMoE, PhiMoE, Cohere 2 MoE, ERNIE 4.5 MoE,
AFMoE and gpt-oss.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.specs.hfconfig import (
    COHERE_NORM,
    GEMMA2_NORM,
    Config,
    _deepseek_moe,
    _dense_ffn,
    _experts,
    gated_decoder_spec,
    layer_mixers,
    qwen_moe,
    qwen_sparse_layers,
    routed,
    windowed,
    with_pattern,
    with_sinks,
)
from ffncli.specs.spec import AttentionSpec, FfnSpec, ModelSpec, NormSpec


def mixtral_moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
    return _experts(c, "num_local_experts", "intermediate_size", 2, experts_default=8), 0


def mixtral_spec(c: Config) -> ModelSpec:
    """MixtralForCausalLM: Mistral's layers (no attention biases whatever attention_bias says,
    windows as windowed reads them), every FFN Mixtral's experts."""
    return windowed(lambda c: gated_decoder_spec(c, "mixtral", qkv_bias=False, out_bias=False,
                                                 moe=mixtral_moe))(c)


def qwen3_moe_spec(c: Config, family: str) -> ModelSpec:
    """Qwen3MoeForCausalLM (and Mellum, built alike): a norm on Q and on K, Qwen's sparse layers
    without a shared expert."""
    return _qwen_layers(gated_decoder_spec(c, family, qk_norm="head",
                                           moe=lambda c, n: qwen_moe(c, n, shared=False)), c)


def qwen2_moe_spec(c: Config) -> ModelSpec:
    """Qwen2MoeForCausalLM: biases on Q, K and V by qkv_bias (never O), Qwen's sparse layers
    with a gated shared expert."""
    return _qwen_layers(gated_decoder_spec(c, "qwen2_moe", qkv_bias=c.bool("qkv_bias", True),
                                           out_bias=False,
                                           moe=lambda c, n: qwen_moe(c, n, shared=True)), c)


def _qwen_layers(spec: ModelSpec, c: Config) -> ModelSpec:
    """Qwen's dense layers where the config puts them: the first ones are ``layers.dense``;
    any other placement (mlp_only_layers past a sparse layer, decoder_sparse_step) a pattern of
    layer kinds, so that the forward reads each layer's own FFN."""
    n = spec.layers.decoder
    sparse = qwen_sparse_layers(c, n)
    if sparse == sorted(sparse) or spec.dense_ffn is None:  # dense first, then sparse
        return spec
    return with_pattern(spec, c, ["full"] * n, [spec.ffn if s else spec.dense_ffn
                                                for s in sparse])


def routed_decoder(c: Config, family: str, *, experts_key: str, top_k: int, experts: int,
                   **options: Any) -> ModelSpec:
    """A LLaMA-shaped decoder whose every FFN is a mixture of SwiGLU experts (``routed``): top-k
    of experts_key experts, ``top_k`` and ``experts`` the defaults (OLMoE, FlexOlmo)."""
    return gated_decoder_spec(c, family, moe=routed(experts_key, top_k, experts), **options)


def deepseek_v3_spec(c: Config, family: str = "deepseek_v3") -> ModelSpec:
    """DeepseekV3ForCausalLM: multi-head latent attention (queries through q_lora_rank, or
    straight when it is null; keys and values from a kv_lora_rank latent), mixture of experts.
    DeepSeek-V2 (``family`` deepseek_v2) is built alike; its class names no default top-k."""
    d = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    nope, rope = c.int("qk_nope_head_dim", 128), c.int("qk_rope_head_dim", 64)
    kv_rank = c.at_most("kv_lora_rank", c.int("kv_lora_rank", 512), "hidden_size", d)
    q_rank = c.at_most("q_lora_rank", c.int0("q_lora_rank", 1536), "hidden_size", d)
    if family != "deepseek_v3":
        c.int("num_experts_per_tok")  # required: null routes nowhere
    spec = gated_decoder_spec(c, family, moe=_deepseek_moe)
    bias = c.bool("attention_bias", False)
    attention = AttentionSpec(heads=heads, head_dim=nope + rope, qkv_bias=bias, out_bias=bias,
                              kv_lora_rank=kv_rank, q_lora_rank=q_rank, rope_head_dim=rope,
                              v_head_dim=c.int("v_head_dim", 128))
    return replace(spec, attention=attention)


def gpt_oss_spec(c: Config) -> ModelSpec:
    """GptOssForCausalLM: attention with biases and per-head sinks, layers alternating between
    sliding-window and full attention (layer_types), every FFN a mixture of SwiGLU experts
    with biases (gate and up in one matrix) and a router with a bias."""
    spec = gated_decoder_spec(c, "gpt_oss", seq_default=131072)
    experts = _experts(c, "num_local_experts", "intermediate_size", 4, experts_default=128,
                       router_bias=True)
    spec = replace(spec, ffn=replace(experts, bias=True),
                   attention=replace(spec.attention, sinks=True) if spec.attention else None)
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def glm4_moe_spec(c: Config, family: str = "glm4_moe") -> ModelSpec:
    """Glm4MoeForCausalLM (GLM-4.5): grouped-query attention with biases on Q, K and V (never
    O) and optional norms on Q and K; DeepSeek-V3's mixture of experts (first_k_dense_replace
    dense layers, n_shared_experts shared ones, the score-correction bias a buffer). The
    multi-token-prediction layer (num_nextn_predict_layers) is not built by transformers.
    Without head_dim a head is hidden_size // num_attention_heads wide, rounded down."""
    floor = c.int("hidden_size") // c.int("num_attention_heads")
    return gated_decoder_spec(c, family, qkv_bias=c.bool("attention_bias", False),
                              head_dim_default=max(floor, 1),
                              out_bias=False, moe=_deepseek_moe,
                              qk_norm="head" if c.bool("use_qk_norm", False) else "none")


def minimax_m2_spec(c: Config) -> ModelSpec:
    """MiniMaxM2ForCausalLM: norms on all of Q and all of K (one weight per head and channel),
    every FFN a mixture of SwiGLU experts of intermediate_size, the router without bias (its
    score-correction bias is a buffer)."""
    return gated_decoder_spec(c, "minimax_m2", qk_norm="heads", seq_default=196608,
                              moe=lambda c, n: (_experts(c, "num_local_experts",
                                                         "intermediate_size", 8), 0))


def llama4_text_spec(c: Config) -> ModelSpec:
    """Llama4ForCausalLM: chunked and full attention by layer_types (its Q and K norm is an L2
    norm without weights), layers listed in moe_layers a mixture of experts of
    intermediate_size with one shared expert as wide (no gate), the others a dense FFN of
    intermediate_size_mlp."""
    spec = gated_decoder_spec(c, "llama4_text", seq_default=131072)
    experts = _experts(c, "num_local_experts", "intermediate_size", 1, experts_default=16,
                       shared_d_ff=c.int("intermediate_size"))
    n = spec.layers.decoder
    dense = _dense_ffn(c, key="intermediate_size_mlp")
    step = c.int("interleave_moe_layer_step", 1)
    moe_layers = set(c.ints("moe_layers") or range(step - 1, n, step))
    ffns = [experts if i in moe_layers else dense for i in range(n)]
    return with_pattern(replace(spec, ffn=experts), c, layer_mixers(c, n), ffns)


def _granite_moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
    shared = c.int0("shared_intermediate_size", 0)
    return _experts(c, "num_local_experts", "intermediate_size", 2, experts_default=8,
                    shared_d_ff=shared), 0


def granitemoe_spec(c: Config, family: str) -> ModelSpec:
    """GraniteMoe(Shared)ForCausalLM: Mixtral's experts behind a bias-free router, attention
    biases by attention_bias; GraniteMoeShared adds a shared expert of
    shared_intermediate_size (none when 0), without a gate."""
    return gated_decoder_spec(c, family, moe=_granite_moe)


def granitemoe_swa_spec(c: Config) -> ModelSpec:
    """GraniteMoE with sliding windows (windowed) and a learned sink logit per head."""
    return with_sinks(windowed(lambda c: granitemoe_spec(c, "granitemoe_swa")))(c)


def phimoe_spec(c: Config) -> ModelSpec:
    """PhimoeForCausalLM, its layers' windows as windowed reads them."""
    return windowed(_phimoe_layers)(c)


def _phimoe_layers(c: Config) -> ModelSpec:
    """PhimoeForCausalLM: Mixtral's experts behind LayerNorms with biases, an lm_head bias by
    lm_head_bias."""
    spec = gated_decoder_spec(c, "phimoe", moe=routed("num_local_experts", 2, 16),
                              norm=NormSpec(kind="layernorm", bias=True, final=True))
    assert spec.embeddings is not None  # gated_decoder_spec always builds them
    return replace(spec, embeddings=replace(spec.embeddings,
                                            head_bias=c.bool("lm_head_bias", False)))


def cohere2_moe_spec(c: Config) -> ModelSpec:
    """Cohere2MoeForCausalLM: Cohere 2's norms and windows, each layer a mixture of experts or
    a dense FFN of intermediate_size by mlp_layer_types ("sparse", "dense")."""
    spec = gated_decoder_spec(c, "cohere2_moe", tie_default=True, norm=COHERE_NORM,
                              moe=routed("num_experts", 2, 8))
    n = spec.layers.decoder
    kinds = c.names("mlp_layer_types", n, ("sparse", "dense")) or ["sparse"] * n
    ffns = [spec.ffn if k == "sparse" else _dense_ffn(c) for k in kinds]
    return with_pattern(spec, c, layer_mixers(c, n), ffns)


def ernie4_5_moe_spec(c: Config) -> ModelSpec:
    """Ernie4_5_MoeForCausalLM: use_bias on attention, dense FFNs and the head; layer i a
    mixture of experts when (i + 1) is a multiple of moe_layer_interval and i lies within
    moe_layer_start_index..moe_layer_end_index, a dense FFN of intermediate_size otherwise. Its
    router's score-correction bias is a parameter (one per expert), counted as a router bias;
    moe_num_shared_experts shared experts run as one FFN that much wider, without a gate."""
    bias = c.bool("use_bias", False)
    shared = c.int0("moe_num_shared_experts", 0) * c.int("moe_intermediate_size")
    experts = _experts(c, "num_experts", "moe_intermediate_size", 2, router_bias=True,
                       shared_d_ff=shared)
    spec = gated_decoder_spec(c, "ernie4_5_moe", tie_default=True, qkv_bias=bias,
                              out_bias=bias, moe=lambda c, n: (experts, 0))
    n = spec.layers.decoder
    step = c.int("moe_layer_interval", 1)
    first, last = c.int0("moe_layer_start_index", 0), c.int0("moe_layer_end_index", n - 1)
    dense = replace(_dense_ffn(c), bias=bias)
    ffns = [experts if (i + 1) % step == 0 and first <= i <= last else dense
            for i in range(n)]
    assert spec.embeddings is not None  # gated_decoder_spec always builds them
    spec = replace(spec, embeddings=replace(spec.embeddings, head_bias=bias))
    return with_pattern(spec, c, layer_mixers(c, n), ffns)


def afmoe_spec(c: Config) -> ModelSpec:
    """AfmoeForCausalLM (Arcee): a gate on each head's output, norms on Q and K, four norms a
    layer, layers sliding or full by layer_types; num_dense_layers dense first layers, then
    experts of moe_intermediate_size with num_shared_experts shared ones (one FFN that much
    wider) and a per-expert bias on the routing scores (a parameter, counted as a router
    bias)."""
    def moe(c: Config, layers: int) -> tuple[FfnSpec, int]:
        shared = c.int0("num_shared_experts", 0) * c.int("moe_intermediate_size")
        dense = c.at_most("num_dense_layers", c.int0("num_dense_layers", 0),
                          "num_hidden_layers", layers)
        return _experts(c, "num_experts", "moe_intermediate_size", 6, router_bias=True,
                        shared_d_ff=shared), dense
    spec = gated_decoder_spec(c, "afmoe", qk_norm="head", norm=GEMMA2_NORM, moe=moe)
    assert spec.attention is not None  # gated_decoder_spec always builds it
    spec = replace(spec, attention=replace(spec.attention, output_gate=True))
    ffns = [k.ffn or spec.ffn for k in spec.decoder_kinds()]
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder), ffns)
