"""What ffncli lacks to count each model type of transformers it refuses: one line each,
said when a config.json of the type is refused. Generated from the zoo (tests/data/zoo/
truths.json: transformers 5.25.0; the parameter names of each built class), data only. A type
counted since (a row of ffncli.specs.table.ARCHS) is read, whatever this says."""

from __future__ import annotations

LACKS: dict[str, str] = {
    "blt": "its vision or audio tower",
    "deepseek_v4":
        "its hyper-connections (attn_hc, ffn_hc), compressed and indexed attention and"
        " hash-routed experts (hash_moe)",
    "git": "its vision or audio tower",
    "inkling2_loop_text":
        "attention residuals over earlier layers, message gates between loops, dynamic short"
        " convolutions and relative-position biases",
    "inkling2_text":
        "attention residuals over earlier layers, dynamic short convolutions, sink"
        " projections and relative-position biases",
    "mllama": "its vision or audio tower",
    "modernvbert": "its vision or audio tower",
    "moshi": "its vision or audio tower",
    "phi4_multimodal": "its vision or audio tower",
    "qwen4_exp": "a model transformers itself cannot build from these defaults",
    "ultravbert": "its vision or audio tower",
    "voxtral_realtime": "its vision or audio tower",
}
