"""TODO base."""
