"""What the management API reads and writes: models, versions, uploads, traffic policies and audit events."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.audit.models import AuditEvent
from console.registry.cluster.serializers import ClusterSerializer, ReplicaStateSerializer, cluster_view
from console.registry.engine_status import EngineStatus
from console.registry.models import MODEL_NAME_RULE, ModelVersion, RegisteredModel, model_name_validator
from console.registry.uploads import UploadRejected, parse_config_text
from engine.api import ModelConfig


class VersionSerializer(serializers.ModelSerializer):
    """A version as listed: where it stands, what it is, who sent it."""

    uploaded_by = serializers.SerializerMethodField()
    is_active = serializers.SerializerMethodField()
    is_serving = serializers.SerializerMethodField(
        help_text="this process's engine answers unversioned requests with it"
    )
    is_loaded = serializers.SerializerMethodField(help_text="READY in this process's engine")
    memory = serializers.SerializerMethodField(
        help_text="in this process's engine: resident or not, footprint_bytes per pool, loads, last_used, "
        "cold_start_seconds, on_demand, pinned (null when not loaded)"
    )
    replicas = serializers.SerializerMethodField(help_text="its state on each replica serving this database")
    replica_summary = serializers.SerializerMethodField(
        help_text="'READY on 3/3', 'READY on 2/3 · FAILED on 1: <reason>' (live replicas); empty with one replica"
    )
    loadable = serializers.BooleanField(
        read_only=True,
        help_text="a load (a FAILED version's retry) could succeed: its files are in the store; false for an upload "
        "that failed its checks",
    )

    class Meta:
        model = ModelVersion
        fields = [
            "number",
            "state",
            "error",
            "replica_summary",
            "replicas",
            "should_load",
            "loadable",
            "is_active",
            "is_serving",
            "is_loaded",
            "memory",
            "sha256",
            "size",
            "notes",
            "uploaded_by",
            "uploaded_at",
            "state_changed_at",
            "artifact",
        ]
        read_only_fields = fields

    def get_uploaded_by(self, version: ModelVersion) -> str | None:
        return version.uploaded_by.get_username() if version.uploaded_by else None

    def get_is_active(self, version: ModelVersion) -> bool:
        return version.model.active_version_id == version.pk

    def get_is_serving(self, version: ModelVersion) -> bool:
        return EngineStatus.of(version.model.name, self.context).serving == version.number

    def get_is_loaded(self, version: ModelVersion) -> bool:
        return version.number in EngineStatus.of(version.model.name, self.context).ready

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_memory(self, version: ModelVersion) -> dict[str, Any] | None:
        return EngineStatus.of(version.model.name, self.context).memory.get(version.number)

    @extend_schema_field(ReplicaStateSerializer(many=True))
    def get_replicas(self, version: ModelVersion) -> list[dict[str, Any]]:
        return ReplicaStateSerializer(cluster_view(self.context).of_version(version), many=True).data

    def get_replica_summary(self, version: ModelVersion) -> str:
        return cluster_view(self.context).summary(version)


class VersionDetailSerializer(VersionSerializer):
    """A version with the effective config it was checked with."""

    class Meta(VersionSerializer.Meta):
        fields = [*VersionSerializer.Meta.fields, "config"]
        read_only_fields = fields


class RegisteredModelSerializer(serializers.ModelSerializer):
    """A registered model at a glance: its active version and what this process serves."""

    created_by = serializers.SerializerMethodField()
    active_version = serializers.SerializerMethodField()
    serving_version = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField(help_text="the state of the active version")
    replica_summary = serializers.SerializerMethodField(
        help_text="the active version's state per replica ('READY on 3/3'); empty with one replica"
    )
    version_count = serializers.SerializerMethodField()
    traffic_mode = serializers.CharField(
        read_only=True, help_text="active, canary or shadow: how requests that name no version are shared"
    )

    class Meta:
        model = RegisteredModel
        fields = [
            "name",
            "description",
            "backend",
            "platform",
            "created_by",
            "created_at",
            "active_version",
            "serving_version",
            "state",
            "replica_summary",
            "version_count",
            "traffic_mode",
            "on_demand",
            "pinned",
        ]
        read_only_fields = fields

    def get_created_by(self, model: RegisteredModel) -> str | None:
        return model.created_by.get_username() if model.created_by else None

    def get_active_version(self, model: RegisteredModel) -> int | None:
        return model.active_number

    def get_serving_version(self, model: RegisteredModel) -> int | None:
        return EngineStatus.of(model.name, self.context).serving

    def get_state(self, model: RegisteredModel) -> str | None:
        return model.active_version.state if model.active_version_id else None

    def get_replica_summary(self, model: RegisteredModel) -> str:
        return cluster_view(self.context).summary(model.active_version) if model.active_version_id else ""

    def get_version_count(self, model: RegisteredModel) -> int:
        return len(model.versions.all())


class RegisteredModelDetailSerializer(RegisteredModelSerializer):
    """A model with every version."""

    versions = serializers.SerializerMethodField()
    cluster = serializers.SerializerMethodField(help_text="the replicas serving this database, live and gone")

    class Meta(RegisteredModelSerializer.Meta):
        fields = [*RegisteredModelSerializer.Meta.fields, "versions", "cluster"]
        read_only_fields = fields

    @extend_schema_field(ClusterSerializer)
    def get_cluster(self, model: RegisteredModel) -> dict[str, Any]:
        view = cluster_view(self.context)
        return ClusterSerializer({"live": list(view.live), "gone": list(view.gone)}).data

    @extend_schema_field(VersionSerializer(many=True))
    def get_versions(self, model: RegisteredModel) -> list[dict[str, Any]]:
        return VersionSerializer(model.versions.all(), many=True, context=self.context).data


class ModelCreateSerializer(serializers.Serializer):
    """Register a model by name (versions are uploaded afterwards)."""

    name = serializers.CharField(
        max_length=128, validators=[model_name_validator], help_text=f"Triton-safe: {MODEL_NAME_RULE}"
    )
    description = serializers.CharField(required=False, allow_blank=True, default="")
    backend = serializers.CharField(required=False, allow_blank=True, default="", max_length=64)
    platform = serializers.CharField(required=False, allow_blank=True, default="", max_length=64)


class ModelUpdateSerializer(serializers.Serializer):
    """What may change on a model: its description and memory flags (a name is its identity in the store and on
    /v2)."""

    description = serializers.CharField(allow_blank=True, required=False)
    on_demand = serializers.BooleanField(
        required=False, help_text="loaded on its first request, evictable when idle under the memory budget"
    )
    pinned = serializers.BooleanField(required=False, help_text="never evicted once loaded")
    name = serializers.CharField(required=False, help_text="may be sent, but only unchanged")

    def validate_name(self, value: str) -> str:
        if value != self.context["name"]:
            raise serializers.ValidationError("a model's name cannot change (it names its folder and its /v2 URL)")
        return value


@extend_schema_field(OpenApiTypes.BINARY)
class ConfigField(serializers.Field):
    """A model config as a file part or a text field: config.pbtxt text or its JSON form."""

    def to_internal_value(self, data: Any) -> ModelConfig:
        try:
            if isinstance(data, UploadedFile):
                return parse_config_text(data.read(), data.name or "")
            if isinstance(data, str):
                return parse_config_text(data)
        except UploadRejected as exc:
            raise serializers.ValidationError(exc.message) from None
        raise serializers.ValidationError("send the config as a file or as text (config.pbtxt or JSON)")

    def to_representation(self, value: Any) -> Any:
        return None


class VersionUploadSerializer(serializers.Serializer):
    """A new version: the model file or an archive of the version folder, with an optional config."""

    file = serializers.FileField(
        required=False,
        default=None,
        help_text="model.onnx, model.pt, model.pt2, model.py, model.gguf, or a .zip/.tar.gz of the version folder (a "
        "Hugging Face folder too) or of several "
        "model folders (this model's and others', each added as a version of its model, registered when new); "
        "left out for an ensemble, whose version holds no model file",
    )
    config = ConfigField(required=False, help_text="config.pbtxt or its JSON form; the model's current one if left out")
    notes = serializers.CharField(required=False, allow_blank=True, default="")
    activate = serializers.BooleanField(required=False, default=False, help_text="make it active once it loads")


class CompanionSerializer(serializers.Serializer):
    """A version added with another model's upload (from an archive of several model folders)."""

    model = serializers.CharField(source="model.name")
    number = serializers.IntegerField()
    state = serializers.CharField()


class VersionUploadedSerializer(VersionDetailSerializer):
    """The uploaded version, and the versions of the other model folders its archive held."""

    companions = serializers.SerializerMethodField()

    class Meta(VersionDetailSerializer.Meta):
        fields = [*VersionDetailSerializer.Meta.fields, "companions"]
        read_only_fields = fields

    @extend_schema_field(CompanionSerializer(many=True))
    def get_companions(self, version: ModelVersion) -> list[dict[str, Any]]:
        return CompanionSerializer(self.context.get("companions", []), many=True).data


class TrafficPolicySerializer(serializers.Serializer):
    """A traffic policy (the engine's JSON form): how requests that name no version are shared among versions.

    A request that names a version always gets it. `canary` splits the others by `weights` (sticky per request
    parameter `sticky_key`); `shadow` answers from the active version and copies a `shadow_share` of the requests to
    the `candidate`, comparing its answers. The rollback fields arm the engine's guard: past the error rate or the
    p99 latency over the window, every request goes back to the active version.
    """

    mode = serializers.ChoiceField(choices=["active", "canary", "shadow"], default="active")
    weights = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        help_text='canary: version number -> weight from 0 to 100, e.g. {"1": 90, "2": 10}; every version READY',
    )
    candidate = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, help_text="shadow: the READY version that runs the copies"
    )
    shadow_share = serializers.FloatField(required=False, help_text="shadow: the share of requests copied, (0, 1]")
    rollback_error_rate = serializers.FloatField(
        required=False, allow_null=True, help_text="roll back when the candidate fails more than this share, [0, 1]"
    )
    rollback_p99_ms = serializers.FloatField(
        required=False, allow_null=True, min_value=0, help_text="or when its p99 latency passes this many ms"
    )
    rollback_window_seconds = serializers.FloatField(required=False, min_value=0.001)
    rollback_min_requests = serializers.IntegerField(required=False, min_value=1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            raise serializers.ValidationError(f"unknown traffic policy field(s): {', '.join(unknown)}")
        return attrs


class OutputAgreementSerializer(serializers.Serializer):
    """How often the candidate's answers matched the active version's for one output."""

    agree = serializers.IntegerField()
    disagree = serializers.IntegerField()
    max_abs_diff = serializers.FloatField(allow_null=True, help_text="floats: the largest difference seen")
    argmax_agree = serializers.IntegerField(allow_null=True, help_text="floats: rows whose arg max matched")
    argmax_disagree = serializers.IntegerField(allow_null=True)


class ShadowComparisonSerializer(serializers.Serializer):
    """What a shadow saw in this process: agreement per output, the candidate's failures, sampled disagreements."""

    outputs = serializers.DictField(child=OutputAgreementSerializer())
    candidate_failures = serializers.IntegerField()
    disagreements = serializers.ListField(
        child=serializers.JSONField(),
        help_text="the last few: {outputs, inputs, active, candidate}, each tensor as {shape, values, truncated}",
    )


class TrafficSerializer(serializers.Serializer):
    """A model's traffic: the desired policy, the one in force in this process's engine, and what it saw."""

    model = serializers.CharField()
    active_version = serializers.IntegerField(allow_null=True)
    ready_versions = serializers.ListField(child=serializers.IntegerField(), help_text="READY in the registry")
    policy = TrafficPolicySerializer(help_text="the desired policy (the reconciler puts it in force)")
    promotion_candidate = serializers.IntegerField(
        allow_null=True, help_text="the version that 'promote' makes active (none under the active mode)"
    )
    in_force = TrafficPolicySerializer(allow_null=True, help_text="the policy this process's engine applies now")
    rolled_back = serializers.CharField(help_text="why the engine's guard last rolled the policy back, if it did")
    shadow = ShadowComparisonSerializer(allow_null=True)


class AuditEventSerializer(serializers.ModelSerializer):
    """One entry of the audit trail."""

    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = AuditEvent
        fields = ["id", "actor", "action", "object", "created_at", "detail"]
        read_only_fields = fields
