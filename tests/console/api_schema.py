"""The management API's OpenAPI document for schemathesis, generated in process (/api/schema/ needs a sign-in)."""

from __future__ import annotations

import json

import schemathesis
from django.core.wsgi import get_wsgi_application
from drf_spectacular.generators import SchemaGenerator


def api_schema(path_regex: str):
    """The schema of the paths matching `path_regex`, called through the WSGI application."""
    document = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))
    schema = schemathesis.openapi.from_dict(document)
    schema.app = get_wsgi_application()
    return schema.include(path_regex=path_regex)
