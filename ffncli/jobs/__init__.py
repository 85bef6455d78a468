"""TODO jobs."""
