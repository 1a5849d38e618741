"""Readers for model checkpoints (GGUF, safetensors), all seen through GGUF names."""
