"""Raises KeyboardInterrupt while being imported."""

raise KeyboardInterrupt
