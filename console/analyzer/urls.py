"""URLs of the analyzer: /api/models/{name}/analyses/ and one analysis's .../cancel and .../apply."""

from __future__ import annotations

from django.urls import path

from console.analyzer import api
from console.registry.urls import both_paths

ANALYSES = "api/models/<str:name>/analyses/"
ANALYSIS = "api/models/<str:name>/analyses/<int:pk>"

urlpatterns = [
    path(ANALYSES, api.AnalysisListView.as_view(), name="api-analyses"),
    path(f"{ANALYSIS}/", api.AnalysisDetailView.as_view(), name="api-analysis"),
    *both_paths(f"{ANALYSIS}/cancel", api.AnalysisCancelView, "api-analysis-cancel"),
    *both_paths(f"{ANALYSIS}/apply", api.AnalysisApplyView, "api-analysis-apply"),
]
