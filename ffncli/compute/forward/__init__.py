"""The whole model in NumPy, token ids in, every layer's FFN input out: the math (``ops``), one
layer (``layer``), the families that read a checkpoint's layers (``families``), and the walk
over many sequences with its spill file (``walk``)."""
