"""What a model is, without NumPy: the frozen specs and YAML presets (``spec``), Hugging Face
config readers (``hfconfig``), the spec a GGUF file's metadata implies (``gguf``), and the one
table of every architecture ffncli knows (``archs``)."""
