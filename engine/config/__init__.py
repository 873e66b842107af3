"""Model configurations: Triton's `ModelConfig` as dataclasses, its text and JSON forms, checks, names, data types."""
