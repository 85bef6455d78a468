"""ffncli: inspect, run and count the position-wise feed-forward network of Transformers."""

__version__ = "0.1.0"
