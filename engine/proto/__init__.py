"""Protobuf classes generated from model_config.proto (Triton's ModelConfig schema, package infera.config)."""
