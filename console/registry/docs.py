"""Swagger UI for the management API, served from the drf-spectacular-sidecar package (no CDN)."""

from __future__ import annotations

from django.templatetags.static import static
from drf_spectacular.views import SpectacularSwaggerView

SIDECAR_SWAGGER = "drf_spectacular_sidecar/swagger-ui-dist"


class LocalSwaggerView(SpectacularSwaggerView):
    """SpectacularSwaggerView with its assets from this server's static files, whatever the settings say."""

    url_name = "api-schema"

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"{SIDECAR_SWAGGER}/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static(f"{SIDECAR_SWAGGER}/favicon-32x32.png")
