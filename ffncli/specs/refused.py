"""What ffncli lacks to count each model type of transformers it refuses: one line each,
said when a config.json of the type is refused. Generated from the zoo (tests/data/zoo/
truths.json: transformers 5.25.0; the parameter names of each built class), data only. A type
counted since (a row of ffncli.specs.archs.ARCHS) is read, whatever this says."""

from __future__ import annotations

LACKS: dict[str, str] = {
    "apertus": "a reader for its layers (attention_layernorm.weight, feedforward_layernorm.weight)",
    "apertus1p5_text":
        "a reader for its layers (attention_layernorm.weight, feedforward_layernorm.weight)",
    "arcee": "a reader for its layers",
    "audioflamingo3": "its vision or audio tower",
    "biogpt": "a reader for its layers (fc1.bias, fc1.weight)",
    "bitnet": "a reader for its layers (mlp.ffn_sub_norm.weight, self_attn.attn_sub_norm.weight)",
    "blt": "its vision or audio tower",
    "codegen": "a reader for its layers (attn.out_proj.weight, attn.qkv_proj.weight)",
    "cohere_compass_text": "a model transformers itself cannot build from these defaults",
    "cpmant": "a reader for its layers (ffn.ffn.w_in.w_*.weight, ffn.ffn.w_out.weight)",
    "ctrl": "a reader for its layers (ffn.*.bias, ffn.*.weight)",
    "dbrx": "a model transformers itself cannot build from these defaults",
    "deepseek_v4":
        "its hyper-connections (attn_hc, ffn_hc), compressed and indexed attention and"
        " hash-routed experts (hash_moe)",
    "diffllama": "a reader for its layers (self_attn.lambda_k1, self_attn.lambda_k2)",
    "doge": "a reader for its layers (input_residual, post_attention_residual)",
    "dory": "a reader for its layers (lambda_*, mlp.suv_gate)",
    "dots1": "a model transformers itself cannot build from these defaults",
    "dots3_note": "a model transformers itself cannot build from these defaults",
    "emu3": "a model transformers itself cannot build from these defaults",
    "esm": "a model transformers itself cannot build from these defaults",
    "fuyu": "a reader for its layers (input_layernorm.bias, mlp.dense_4h_to_h.bias)",
    "gemma3n": "a model transformers itself cannot build from these defaults",
    "gemma4": "a reader for its layers (per_layer_input_gate.weight, per_layer_projection.weight)",
    "gemma4_assistant": "a model transformers itself cannot build from these defaults",
    "gemma4_text":
        "a reader for its layers (per_layer_input_gate.weight, per_layer_projection.weight)",
    "gemma4_unified":
        "a reader for its layers (post_feedforward_layernorm.weight,"
        " pre_feedforward_layernorm.weight)",
    "gemma4_unified_assistant":
        "a reader for its layers (post_feedforward_layernorm.weight,"
        " pre_feedforward_layernorm.weight)",
    "gemma4_unified_text":
        "a reader for its layers (post_feedforward_layernorm.weight,"
        " pre_feedforward_layernorm.weight)",
    "git": "its vision or audio tower",
    "glmasr": "its vision or audio tower",
    "got_ocr2": "its vision or audio tower",
    "gpt-sw3": "a reader for its layers (attn.c_attn.bias, attn.c_attn.weight)",
    "gpt_neo":
        "a reader for its layers (attn.attention.k_proj.weight, attn.attention.out_proj.bias)",
    "gpt_neox_japanese": "a reader for its layers (attention.dense.weight, attention.dense_bias)",
    "granite_speech": "its vision or audio tower",
    "granite_speech_plus": "its vision or audio tower",
    "hrm_text": "a reader for its layers (self_attn.gate_proj.weight)",
    "hunyuan_v1_dense": "a model transformers itself cannot build from these defaults",
    "hunyuan_v1_moe": "a model transformers itself cannot build from these defaults",
    "inkling2_loop_text":
        "attention residuals over earlier layers, message gates between loops, dynamic short"
        " convolutions and relative-position biases",
    "inkling2_text":
        "attention residuals over earlier layers, dynamic short convolutions, sink"
        " projections and relative-position biases",
    "jais2": "a reader for its layers (input_layernorm.bias, mlp.down_proj.bias)",
    "jetmoe":
        "a mixture of attention heads (routed Q and O projections: active attention) and the"
        " bias on its experts' summed output",
    "lfm2_moe": "a model transformers itself cannot build from these defaults",
    "ministral": "a model transformers itself cannot build from these defaults",
    "mllama": "its vision or audio tower",
    "modernbert-decoder": "a reader for its layers (attn.Wo.weight, attn.k_proj.weight)",
    "modernvbert": "its vision or audio tower",
    "moshi": "its vision or audio tower",
    "moss_transcribe_diarize": "its vision or audio tower",
    "musicflamingo": "its vision or audio tower",
    "musicgen": "a model transformers itself cannot build from these defaults",
    "musicgen_melody": "a model transformers itself cannot build from these defaults",
    "nanochat": "a reader for its layers (mlp.fc1.weight, mlp.fc2.weight)",
    "nemotron": "a model transformers itself cannot build from these defaults",
    "neomme":
        "its squared-ReLU FFN, value embeddings, gated output projection and image patch"
        " embedder",
    "omniasr": "its vision or audio tower",
    "openai-gpt": "a reader for its layers (attn.c_attn.bias, attn.c_attn.weight)",
    "persimmon": "a reader for its layers (input_layernorm.bias, mlp.dense_4h_to_h.bias)",
    "phi4_multimodal": "its vision or audio tower",
    "qwen2_audio": "its vision or audio tower",
    "qwen3_asr": "its vision or audio tower",
    "qwen4_exp": "a model transformers itself cannot build from these defaults",
    "qwen4_exp_text": "a model transformers itself cannot build from these defaults",
    "ultravbert": "its vision or audio tower",
    "voxtral": "its vision or audio tower",
    "voxtral_realtime": "its vision or audio tower",
    "whisper": "a reader for its encoder",
    "xglm": "a reader for its layers (fc1.bias, fc1.weight)",
    "xlnet": "a reader for its layers (ff.layer_*.bias, ff.layer_*.weight)",
    "zaya":
        "a skip expert its router may pick (an active count that is a range), its attention's"
        " convolutions over Q and K (and delayed values), its router's MLP and residual"
        " scales",
}
