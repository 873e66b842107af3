"""URLs of the registry: the pages, the management API (/api/models/, /api/audit/) and its Swagger UI."""

from __future__ import annotations

from django.urls import path, re_path

from console.registry import api, views
from console.registry.docs import LocalSwaggerView

VERSION = r"^api/models/(?P<name>[^/]+)/versions/(?P<number>[^/]+)"

urlpatterns = [
    path("models/", views.model_list, name="registry-models"),
    path("models/<str:name>/", views.model_detail, name="registry-model"),
    path("audit/", views.audit_log, name="registry-audit"),
    path("api/docs/", LocalSwaggerView.as_view(), name="api-docs"),
    path("api/models/", api.ModelListView.as_view(), name="api-models"),
    path("api/models/<str:name>/", api.ModelDetailView.as_view(), name="api-model"),
    path("api/models/<str:name>/versions/", api.VersionListView.as_view(), name="api-versions"),
    path("api/models/<str:name>/versions/<str:number>/", api.VersionDetailView.as_view(), name="api-version"),
    # the actions are listed without a trailing slash; both spellings answer, since a POST cannot be redirected
    re_path(rf"{VERSION}/activate/?$", api.VersionActivateView.as_view(), name="api-version-activate"),
    re_path(rf"{VERSION}/load/?$", api.VersionLoadView.as_view(), name="api-version-load"),
    re_path(rf"{VERSION}/unload/?$", api.VersionUnloadView.as_view(), name="api-version-unload"),
    path("api/audit/", api.AuditListView.as_view(), name="api-audit"),
]
