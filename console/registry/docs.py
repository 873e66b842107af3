"""Swagger UI for the management API, served from the drf-spectacular-sidecar package (no CDN)."""

from __future__ import annotations

from django.templatetags.static import static
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console.accounts.permissions import CanViewModels

SIDECAR_SWAGGER = "drf_spectacular_sidecar/swagger-ui-dist"


class LocalSwaggerView(SpectacularSwaggerSplitView):
    """Swagger UI with its assets from this server's static files and its start-up script as a file of its own
    (the console's Content-Security-Policy allows no inline script); for signed-in console users only. Its page
    (templates/registry/swagger_ui.html) names its language and darkens Swagger's low-contrast colors."""

    url_name = "api-schema"
    permission_classes = [CanViewModels]
    template_name = "registry/swagger_ui.html"

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"{SIDECAR_SWAGGER}/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static(f"{SIDECAR_SWAGGER}/favicon-32x32.png")


class ProtectedSchemaView(SpectacularAPIView):
    """The OpenAPI document, for signed-in console users and their tokens only (it maps every endpoint)."""

    permission_classes = [CanViewModels]
