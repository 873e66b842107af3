"""The seeded demo models: the demo repository, its ensemble pipeline, sequence models and text generator."""

from __future__ import annotations
