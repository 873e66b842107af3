"""URLs of the registry: the pages, the management API (/api/models/, .../traffic, .../config, /api/audit/) and its
Swagger UI."""

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework.views import APIView

from console.registry import api, audit, config_api, views
from console.registry.docs import LocalSwaggerView

VERSION = "api/models/<str:name>/versions/<str:number>"
TRAFFIC = "api/models/<str:name>/traffic"
CONFIG = "api/models/<str:name>/config"


def both_paths(route: str, view: type[APIView], name: str) -> list[URLPattern]:
    """`route` as the API documents it, and with a trailing slash too (a POST or PUT cannot be redirected)."""
    undocumented = type(f"{view.__name__}WithSlash", (view,), {"schema": None})
    return [path(route, view.as_view(), name=name), path(f"{route}/", undocumented.as_view())]


def action_paths(action: str, view: type[APIView]) -> list[URLPattern]:
    """`.../{n}/<action>`, with and without a trailing slash."""
    return both_paths(f"{VERSION}/{action}", view, f"api-version-{action}")


urlpatterns = [
    path("models/", views.model_list, name="registry-models"),
    path("models/<str:name>/", views.model_detail, name="registry-model"),
    path("audit/", views.audit_log, name="registry-audit"),
    path("api/docs/", LocalSwaggerView.as_view(), name="api-docs"),
    path("api/models/", api.ModelListView.as_view(), name="api-models"),
    path("api/models/<str:name>/", api.ModelDetailView.as_view(), name="api-model"),
    path("api/models/<str:name>/versions/", api.VersionListView.as_view(), name="api-versions"),
    path("api/models/<str:name>/versions/<str:number>/", api.VersionDetailView.as_view(), name="api-version"),
    *action_paths("activate", api.VersionActivateView),
    *action_paths("load", api.VersionLoadView),
    *action_paths("unload", api.VersionUnloadView),
    *both_paths(TRAFFIC, api.TrafficView, "api-traffic"),
    *both_paths(f"{TRAFFIC}/promote", api.TrafficPromoteView, "api-traffic-promote"),
    *both_paths(f"{TRAFFIC}/rollback", api.TrafficRollbackView, "api-traffic-rollback"),
    *both_paths(CONFIG, config_api.ConfigView, "api-model-config"),
    *both_paths(f"{CONFIG}/validate", config_api.ConfigValidateView, "api-model-config-validate"),
    path("api/audit/", audit.AuditListView.as_view(), name="api-audit"),
]
