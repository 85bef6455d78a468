"""TODO counting."""
