"""Infera's serving engine: model repository, backends, instances, schedulers, lifecycle and stats (no Django)."""

__version__ = "0.1.0"
