"""`/api/models/{name}/analyses/...`: start, list, read, cancel and apply analyses (viewers read, operators and
admins change). A start or cancel here also wakes this serving process's runner, when the request reached one."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.analyzer import services
from console.analyzer.runner import AnalysisRunner
from console.analyzer.serializers import (
    AnalysisApplySerializer,
    AnalysisSerializer,
    AnalysisStartSerializer,
    AnalysisSummarySerializer,
)
from console.parsers import JSONParser
from console.registry.api import ErrorSerializer, RegistryAPIView
from console.registry.serializers import VersionDetailSerializer
from console.registry.services import lookups
from console.runtime_of import runtime_of

LISTED = 50


def runner_of(request: Any) -> AnalysisRunner | None:
    """The analysis runner of the serving process a request reached; None outside one (WSGI, tests)."""
    runtime = runtime_of(request)
    return runtime.analyzer if runtime is not None else None


class AnalysisAPIView(RegistryAPIView):
    parser_classes = [JSONParser]

    def analysis(self, name: str, pk: int):
        return services.get_analysis(name, pk)


@extend_schema(tags=["analyses"])
class AnalysisListView(AnalysisAPIView):
    """A model's analyses, newest first; starting one (they run one at a time, in a serving process)."""

    @extend_schema(responses={200: AnalysisSummarySerializer(many=True), 404: ErrorSerializer})
    def get(self, request: Request, name: str) -> Response:
        analyses = lookups.get_model(name).analyses.select_related("model")[:LISTED]
        return Response(AnalysisSummarySerializer(analyses, many=True).data)

    @extend_schema(
        summary="Start an analysis: a sweep of configs over rising concurrency on temporary versions",
        request=AnalysisStartSerializer,
        responses={
            201: AnalysisSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        model = lookups.get_model(name)
        form = AnalysisStartSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        runner = runner_of(request)
        analysis = services.start_analysis(
            request.user, model, form.request(), on_queued=runner.wake if runner is not None else None
        )
        return Response(AnalysisSerializer(analysis).data, status=201)


@extend_schema(tags=["analyses"])
class AnalysisDetailView(AnalysisAPIView):
    """One analysis: its plan, the points measured so far (Pareto front marked), its recommendation."""

    @extend_schema(responses={200: AnalysisSerializer, 404: ErrorSerializer})
    def get(self, request: Request, name: str, pk: int) -> Response:
        return Response(AnalysisSerializer(self.analysis(name, pk)).data)


@extend_schema(tags=["analyses"])
class AnalysisCancelView(AnalysisAPIView):
    """Cancel a queued or running analysis (a running one stops at once, its temporary version unloaded)."""

    @extend_schema(request=None, responses={202: AnalysisSerializer, 403: ErrorSerializer, 409: ErrorSerializer})
    def post(self, request: Request, name: str, pk: int) -> Response:
        runner = runner_of(request)
        analysis = services.cancel_analysis(
            request.user, self.analysis(name, pk), on_cancel=(lambda: runner.cancel(pk)) if runner else None
        )
        return Response(AnalysisSerializer(analysis).data, status=202)


@extend_schema(tags=["analyses"])
class AnalysisApplyView(AnalysisAPIView):
    """Apply the recommended config (or another of the plan) as a new version, active once it is READY."""

    @extend_schema(
        request=AnalysisApplySerializer,
        responses={201: VersionDetailSerializer, 400: ErrorSerializer, 403: ErrorSerializer, 409: ErrorSerializer},
    )
    def post(self, request: Request, name: str, pk: int) -> Response:
        form = AnalysisApplySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        version = services.apply_analysis(
            request.user, self.analysis(name, pk), form.validated_data.get("candidate"), server=self.server()
        )
        return Response(VersionDetailSerializer(version, context=self._context()).data, status=201)
