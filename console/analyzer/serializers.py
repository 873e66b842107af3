"""What the analyses API takes and answers."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from console.analyzer import services
from console.analyzer.frontier import pareto_front
from console.analyzer.models import Analysis

MAX_GRID_VALUES = services.MAX_CONFIGS


def _values(minimum: int, help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.IntegerField(min_value=minimum, max_value=1 << 20),
        required=False,
        default=list,
        max_length=MAX_GRID_VALUES,
        help_text=help_text,
    )


class AnalysisStartSerializer(serializers.Serializer):
    budget_ms = serializers.FloatField(
        min_value=0.001, max_value=3_600_000, help_text="the p99 latency (ms) the recommended config must stay within"
    )
    version = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="the version to analyse (default: the active one)"
    )
    max_concurrency = serializers.IntegerField(
        default=8, min_value=1, max_value=services.MAX_CONCURRENCY, help_text="concurrency 1, 2, 4 ... up to this"
    )
    max_batch_sizes = _values(0, "max_batch_size values of the grid (empty: the version's)")
    queue_delays_us = _values(0, "dynamic batching max_queue_delay_microseconds values (empty: the version's)")
    instance_counts = _values(1, "instance counts (empty: the version's)")
    seconds_per_point = serializers.FloatField(
        default=1.0,
        min_value=services.MIN_SECONDS_PER_POINT,
        max_value=services.MAX_SECONDS_PER_POINT,
        help_text="how long each config is measured at each concurrency",
    )
    sample_inputs = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="one request's inputs, name -> nested list shaped as the request (default: random data)",
    )

    def request(self) -> services.AnalysisRequest:
        return services.AnalysisRequest(**self.validated_data)


class AnalysisApplySerializer(serializers.Serializer):
    candidate = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, help_text="a config of the plan (default: the recommended one)"
    )


class PlannedConfigSerializer(serializers.Serializer):
    label = serializers.CharField()
    override = serializers.JSONField(help_text="the partial config (Triton's field names) over the version's")


class PlanSerializer(serializers.Serializer):
    candidates = PlannedConfigSerializer(many=True)
    concurrency = serializers.ListField(child=serializers.IntegerField())
    seconds_per_point = serializers.FloatField()
    max_seconds = serializers.FloatField(help_text="the time limit, loads included")


class PointSerializer(serializers.Serializer):
    candidate = serializers.IntegerField(help_text="index in plan.candidates")
    concurrency = serializers.IntegerField()
    requests = serializers.IntegerField()
    failures = serializers.IntegerField()
    seconds = serializers.FloatField()
    throughput = serializers.FloatField(help_text="inferences per second")
    p50_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)
    mean_batch = serializers.FloatField()
    client_requests = serializers.IntegerField(
        help_text="requests the model's served versions answered meanwhile: client traffic, not the analysis' load"
    )
    error = serializers.CharField(allow_blank=True)
    pareto = serializers.BooleanField(help_text="on the Pareto front of throughput against p99")


class AnalysisSummarySerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="model.name")
    requested_by = serializers.CharField(source="requested_by_name")
    recommendation = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Analysis
        fields = [
            "id",
            "model",
            "version",
            "state",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "budget_ms",
            "recommendation",
            "note",
            "error",
            "cancel_requested",
            "applied_version",
            "progress",
        ]

    def get_recommendation(self, analysis: Analysis) -> dict[str, Any] | None:
        return analysis.recommendation or None

    def get_progress(self, analysis: Analysis) -> dict[str, int]:
        return {"done": len(analysis.points), "total": analysis.planned_points}


class AnalysisSerializer(AnalysisSummarySerializer):
    plan = PlanSerializer()
    points = serializers.SerializerMethodField()
    sample_inputs = serializers.SerializerMethodField()

    class Meta(AnalysisSummarySerializer.Meta):
        fields = [*AnalysisSummarySerializer.Meta.fields, "plan", "points", "sample_inputs"]

    def get_points(self, analysis: Analysis) -> list[dict[str, Any]]:
        front = set(pareto_front(analysis.points))
        return PointSerializer(
            [{**point, "pareto": index in front} for index, point in enumerate(analysis.points)], many=True
        ).data

    def get_sample_inputs(self, analysis: Analysis) -> bool:
        """Whether it ran on uploaded sample inputs (else random data)."""
        return bool(analysis.sample_inputs)
