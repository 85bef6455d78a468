"""TODO shards."""
