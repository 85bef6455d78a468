"""Many input files as one job: the shards in a stable order (``inputs``), where their tasks run
(``pool``: this process or Dask), what a worker keeps between tasks (``workers``), the tasks
(``tasks``), the drivers that merge or record their results (``drivers``) and the manifests of
resumable jobs (``manifest``)."""
