"""The commands' work, from options to one result: which model and inputs a command means
(``choices``, ``resolve``: opened once), then the job itself (``run``, ``permute``, ``sweep``,
``capture``, and ``shards`` for many inputs, in this process or on a Dask cluster)."""
