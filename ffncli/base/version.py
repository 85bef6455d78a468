"""ffncli's version, in the one place pyproject.toml reads it from (``ffncli.__version__``
re-exports it; the layers that print it import it from here, below everything)."""

VERSION = "0.1.0"
