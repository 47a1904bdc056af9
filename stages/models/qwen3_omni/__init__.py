"""Qwen3-Omni served natively: config, the MoE thinker and talker over paged KV, and the reused reference
modules (audio encoder, code predictor, code2wav). Import the modules themselves; this package imports
nothing, so reading a config does not load transformers."""
