"""TODO formats."""
