"""What ffncli lacks to count each model type of transformers it refuses: one line each,
said when a config.json of the type is refused. Generated from the zoo (tests/data/zoo/
truths.json: transformers 5.25.0; the parameter names of each built class), data only. A type
counted since (a row of ffncli.specs.table.ARCHS) is read, whatever this says."""

from __future__ import annotations

LACKS: dict[str, str] = {
    "blt": "its vision or audio tower",
    "git": "its vision or audio tower",
    "mllama": "its vision or audio tower",
    "modernvbert": "its vision or audio tower",
    "moshi": "its vision or audio tower",
    "phi4_multimodal": "its vision or audio tower",
    "ultravbert": "its vision or audio tower",
    "voxtral_realtime": "its vision or audio tower",
}
