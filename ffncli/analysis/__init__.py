"""What the FFN does, judged: the position-wise properties of any FFN function (permute-check)
and the sparsity of its hidden layer (relu-stats). NumPy."""
