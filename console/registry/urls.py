"""URLs of the registry: the pages, the management API (/api/models/, /api/audit/) and its Swagger UI."""

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework.views import APIView

from console.registry import api, views
from console.registry.docs import LocalSwaggerView

VERSION = "api/models/<str:name>/versions/<str:number>"


def action_paths(action: str, view: type[APIView]) -> list[URLPattern]:
    """`.../{n}/<action>` as the API documents it, and with a trailing slash too (a POST cannot be redirected)."""
    undocumented = type(f"{view.__name__}WithSlash", (view,), {"schema": None})
    return [
        path(f"{VERSION}/{action}", view.as_view(), name=f"api-version-{action}"),
        path(f"{VERSION}/{action}/", undocumented.as_view()),
    ]


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
    path("api/audit/", api.AuditListView.as_view(), name="api-audit"),
]
