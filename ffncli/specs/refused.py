"""What ffncli lacks to count each model type of transformers it refuses: one line each,
said when a config.json of the type is refused. Generated from the zoo (tests/data/zoo/
truths.json: transformers 5.25.0; the parameter names of each built class), data only. A type
counted since (a row of ffncli.specs.table.ARCHS) is read, whatever this says."""

from __future__ import annotations

LACKS: dict[str, str] = {
    "blt":
        "its byte-level parts (the local encoder and decoder around the global"
        " transformer, the hash embeddings and the entropy patcher)",
    "git": "its vision tower, inside the text model (GIT: no text_config to read apart)",
    "mllama":
        "its language model's cross-attention layers (mllama_text_model) and its vision"
        " tower",
    "modernvbert": "its vision tower beside an encoder's text model (a ModernBERT)",
    "moshi": "its audio codec (mimi) and its depth decoder beside the text model",
    "phi4_multimodal":
        "its vision and audio towers and their LoRA adapters inside the text model (no"
        " text_config to read apart)",
    "ultravbert": "its vision tower beside an encoder's text model (an UltraBERT)",
    "voxtral_realtime": "its audio tower and its text model's type (voxtral_realtime_text)",
}
