"""Analyzer test cast: the registry's (a store per test, one user per role, API clients, small model files)."""

from __future__ import annotations

from tests.console.registry import conftest as registry_cast

store = registry_cast.store
engine = registry_cast.engine
admin = registry_cast.admin
operator = registry_cast.operator
viewer = registry_cast.viewer
clean_caches = registry_cast.clean_caches
wsgi_keeps_test_connection = registry_cast.wsgi_keeps_test_connection
as_admin = registry_cast.as_admin
as_operator = registry_cast.as_operator
as_viewer = registry_cast.as_viewer
models_dir = registry_cast.models_dir
simple_onnx = registry_cast.simple_onnx
