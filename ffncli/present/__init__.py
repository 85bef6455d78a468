"""TODO present."""
