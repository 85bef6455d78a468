"""The config readers of model families, one module per family, imported only when a config of
that family is read (the table, :data:`ffncli.specs.archs.ARCHS`, names them by string through
:func:`ffncli.specs.archs.read`). Each reader takes a :class:`ffncli.specs.hfconfig.Config` and
returns a :class:`ffncli.specs.spec.ModelSpec`."""
