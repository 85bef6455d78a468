"""TODO forward."""
