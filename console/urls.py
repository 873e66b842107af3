"""URL map of the Django side (/v2 and /metrics never get here: console/hosting/composition.py routes them first)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from console import views
from console.accounts.login_view import sign_in
from console.registry.docs import ProtectedSchemaView
from console.static_serving import serve_static

handler500 = "console.failure_pages.server_error"  # a database outage is a 503 page, a full disk 507

urlpatterns = [
    path("", views.home, name="home"),
    path("docs/benchmarks.md", views.benchmarks, name="docs-benchmarks"),
    path("accounts/login/", sign_in, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("admin/", admin.site.urls),
    path("monitoring/", include("console.monitoring.urls")),
    path("", include("console.accounts.urls")),
    path("", include("console.registry.urls")),
    path("", include("console.analyzer.urls")),
    path("api/schema/", ProtectedSchemaView.as_view(), name="api-schema"),
    # browsers ask for /favicon.ico on pages that name no icon (the admin, Swagger): the console's, not a 404
    path("favicon.ico", RedirectView.as_view(url=static("console/favicon.svg"), permanent=True)),
    re_path(rf"^{settings.STATIC_URL.strip('/')}/(?P<path>.+)$", serve_static, name="static"),
]
