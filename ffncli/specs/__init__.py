"""TODO specs."""
