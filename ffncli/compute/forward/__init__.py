"""The whole model in NumPy, token ids in, every layer's FFN input out: the math (``ops``), one
layer (``layer``), the families that read a checkpoint's layers (``families``), and the walk
over many sequences with its spill file (``walk``)."""

# the families in modules of their own, which add themselves to families.FAMILIES
from ffncli.compute.forward import gpt_oss, llama4  # noqa: F401, E402
