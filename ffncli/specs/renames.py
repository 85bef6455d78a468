"""transformers' ``attribute_map`` of each text model type: the names a config class reads
(``config.num_experts``) for the keys its files store (``num_local_experts``), so that a
config.json read by ffncli means the same whichever spelling wrote it. Generated from
transformers 5.25.0 (the zoo's version, tests/data/zoo/truths.json) for the types of its three
mappings and their text configs; token ids, dropouts and initialisers left out. Data only: the
maps several families share are named once."""

from __future__ import annotations

# BART and the seq2seq models built like it: a d_model wide encoder and decoder
_BART = {
    "num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
    "num_hidden_layers": "encoder_layers",
}
# GPT-2's n_* names and the models that kept them
_GPT2 = {
    "hidden_size": "n_embd", "max_position_embeddings": "n_positions",
    "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
}
# T5 and its variants
_T5 = {
    "hidden_size": "d_model", "num_attention_heads": "num_heads",
    "num_hidden_layers": "num_layers", "head_dim": "d_kv",
}

# model_type -> {name read: name stored}
ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "axk1": {"num_local_experts": "n_routed_experts"},
    "axk2": {"num_local_experts": "n_routed_experts"},
    "bailing_hybrid": {
        "num_local_experts": "num_experts", "n_shared_experts": "num_shared_experts",
        "num_mtp_layers": "num_nextn_predict_layers",
    },
    "bamba": {"layer_types": "layers_block_type"},
    "bart": _BART,
    "bigbird_pegasus": _BART,
    "blenderbot": _BART,
    "blenderbot-small": _BART,
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    "codegen": {
        "max_position_embeddings": "n_positions", "hidden_size": "n_embd",
        "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
    },
    "ctrl": {
        "max_position_embeddings": "n_positions", "hidden_size": "n_embd",
        "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
    },
    "dbrx": {
        "num_attention_heads": "n_heads", "hidden_size": "d_model",
        "num_hidden_layers": "n_layers", "max_position_embeddings": "max_seq_len",
    },
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {
        "num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers",
    },
    "deepseek_v32": {"num_local_experts": "n_routed_experts"},
    "deepseek_v4": {
        "num_local_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size",
    },
    "distilbert": {
        "hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
    },
    "dots1": {"num_local_experts": "n_routed_experts"},
    "dots3_note_text": {"num_local_experts": "n_routed_experts"},
    "ergo": {"local_attention_window": "sliding_window"},
    "ernie4_5_moe": {
        "num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k",
        "num_mtp_layers": "num_nextn_predict_layers",
    },
    "exaone": {"num_layers": "num_hidden_layers", "activation_function": "hidden_act"},
    "falcon_h1": {"layer_types": "layers_block_type"},
    "flaubert": {
        "hidden_size": "emb_dim", "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
    },
    "flex_olmo": {"num_local_experts": "num_experts"},
    "fsmt": {
        "num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
        "vocab_size": "tgt_vocab_size", "num_hidden_layers": "encoder_layers",
    },
    "funnel": {"hidden_size": "d_model", "num_attention_heads": "n_head"},
    "glm4_moe": {
        "num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers",
    },
    "glm4_moe_lite": {"num_local_experts": "n_routed_experts", "head_dim": "qk_rope_head_dim"},
    "glm_moe_dsa": {"num_local_experts": "n_routed_experts"},
    "gpt-sw3": _GPT2,
    "gpt2": _GPT2,
    "gpt_bigcode": _GPT2,
    "gpt_neo": {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "gptj": _GPT2,
    "granitemoehybrid": {"layers_block_type": "layer_types"},
    "hunyuan_v1_moe": {"num_experts_per_tok": "moe_topk", "num_local_experts": "num_experts"},
    "hy_v3": {"num_local_experts": "num_experts"},
    "hy_v4": {"num_local_experts": "n_routed_experts"},
    "inkling2_loop_text": {
        "sliding_window": "sliding_window_size", "num_local_experts": "n_routed_experts",
        "sconv_kernel_size": "conv_kernel_size", "intermediate_size": "moe_intermediate_size",
    },
    "inkling2_text": {
        "sliding_window": "sliding_window_size", "num_local_experts": "n_routed_experts",
        "sconv_kernel_size": "conv_kernel_size", "intermediate_size": "moe_intermediate_size",
    },
    "inkling_text": {
        "sliding_window": "sliding_window_size", "num_local_experts": "n_routed_experts",
        "sconv_kernel_size": "conv_kernel_size",
    },
    "internlm3": {"qkv_bias": "attention_bias", "bias": "mlp_bias"},
    "jamba": {"num_local_experts": "num_experts"},
    "jetmoe": {"head_dim": "kv_channels"},
    "kimi_linear": {"num_local_experts": "num_experts", "n_shared_experts": "num_shared_experts"},
    "kolibri1": {"num_experts": "num_local_experts"},
    "kolibri1_1": {"num_experts": "num_local_experts"},
    "led": _BART,
    "longcat_flash": {
        "num_local_experts": "n_routed_experts", "num_experts_per_tok": "moe_topk",
        "intermediate_size": "ffn_hidden_size", "moe_intermediate_size": "expert_ffn_hidden_size",
    },
    "longt5": _T5,
    "m2m_100": _BART,
    "marian": _BART,
    "mbart": _BART,
    "mellum": {"num_experts": "num_local_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    "mimo_v2_flash": {"num_local_experts": "n_routed_experts"},
    "minicpm5_moe": {"num_local_experts": "n_routed_experts"},
    "minimax": {"num_experts": "num_local_experts"},
    "minimax_m2": {"num_experts": "num_local_experts"},
    "minimax_m3_vl_text": {"num_experts": "num_local_experts"},
    "mixtral": {"num_experts": "num_local_experts"},
    "mpt": {
        "num_attention_heads": "n_heads", "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
    },
    "mt5": _T5,
    "mvp": _BART,
    "nemotron_h": {"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts"},
    "nllb-moe": _BART,
    "olmoe": {"num_local_experts": "num_experts"},
    "openai-gpt": {
        "max_position_embeddings": "n_positions", "hidden_size": "n_embd",
        "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
    },
    "param2moe": {
        "num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers",
        "num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts",
        "use_qkv_bias": "attention_bias",
    },
    "pegasus": _BART,
    "pegasus_x": _BART,
    "plbart": _BART,
    "prophetnet": {"num_attention_heads": "num_encoder_attention_heads"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "recurrent_gemma": {
        "sliding_window": "attention_window_size", "layer_types": "layers_block_type",
    },
    "rwkv": {"max_position_embeddings": "context_length"},
    "sarvam_mla": {
        "num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers",
        "num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts",
    },
    "sarvam_moe": {
        "num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers",
        "num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts",
        "use_qkv_bias": "attention_bias",
    },
    "seamless_m4t": {
        "num_hidden_layers": "decoder_layers", "num_attention_heads": "decoder_attention_heads",
    },
    "seamless_m4t_v2": {
        "num_hidden_layers": "decoder_layers", "num_attention_heads": "decoder_attention_heads",
    },
    "solar_open": {"num_local_experts": "n_routed_experts"},
    "switch_transformers": {
        "hidden_size": "d_model", "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
    },
    "t5": _T5,
    "trocr": {
        "num_attention_heads": "decoder_attention_heads", "hidden_size": "d_model",
        "num_hidden_layers": "decoder_layers",
    },
    "umt5": _T5,
    "whisper": {
        "num_key_value_heads": "encoder_attention_heads",
        "num_attention_heads": "encoder_attention_heads", "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
    },
    "xglm": {
        "num_attention_heads": "attention_heads", "hidden_size": "d_model",
        "num_hidden_layers": "num_layers",
    },
    "xlm": {
        "hidden_size": "emb_dim", "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
    },
    "xlnet": {
        "hidden_size": "d_model", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
    },
    "zamba": {"layer_types": "layers_block_type", "head_dim": "attention_head_dim"},
    "zamba2": {"layer_types": "layers_block_type", "head_dim": "attention_head_dim"},
}
