"""The engine's language-model bookkeeping: KV-cache blocks, continuous batching, sampling (no model inside)."""
