"""The FFN computed: its formulas, the engine that runs them at GEMM speed, the weights it
runs (random, .npz, one layer of a checkpoint), the memory it may take, and the whole-model
forward around it. NumPy."""
