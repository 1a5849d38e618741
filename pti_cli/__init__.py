"""pti: Packed Twin Inference."""

__version__ = "0.1.0"
