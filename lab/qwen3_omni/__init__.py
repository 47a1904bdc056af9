"""Tiny random Qwen3-Omni model folders, seeded, to test the native Qwen3-Omni against transformers' reference."""
