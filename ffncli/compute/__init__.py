"""TODO compute."""
