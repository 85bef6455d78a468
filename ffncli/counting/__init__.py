"""Counting, pure integer arithmetic: a spec's parameters, FLOPs and KV cache (``model``), a
checkpoint's tensors by group from its headers alone (``files``), and the results ``params``
and ``presets`` print (``results``). Never imports NumPy."""
