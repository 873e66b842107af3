"""The config editor's API: the active version's config, the engine's check of an edit, and saving it.

`GET /api/models/{name}/config` reads it (pbtxt and JSON), `POST .../config/validate` answers as someone types (any
console role: it changes nothing), `POST .../config` saves (operators and admins): as a new version, or applied to
the active version, which reloads.
"""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.accounts.permissions import CanViewModels
from console.parsers import JSONParser
from console.registry import config_edit
from console.registry.api import ErrorSerializer, RegistryAPIView
from console.registry.serializers import VersionDetailSerializer
from console.registry.services import lookups
from console.registry.uploads import MAX_CONFIG_BYTES


class EditedConfigSerializer(serializers.Serializer):
    format = serializers.ChoiceField(config_edit.FORMATS, default="pbtxt", help_text="how `text` is written")
    text = serializers.CharField(
        max_length=MAX_CONFIG_BYTES, trim_whitespace=False, help_text="the whole config, as config.pbtxt or JSON"
    )


class ConfigSaveSerializer(EditedConfigSerializer):
    action = serializers.ChoiceField(
        ["new_version", "apply"],
        help_text="new_version: the active version's files with this config, made active once it loads; "
        "apply: this config for the active version itself, which reloads",
    )
    notes = serializers.CharField(required=False, allow_blank=True, max_length=1000)


class CurrentConfigSerializer(serializers.Serializer):
    model = serializers.CharField()
    version = serializers.IntegerField(help_text="the active version, whose config the editor edits")
    config = serializers.JSONField(help_text="the effective config, JSON form")
    pbtxt = serializers.CharField(help_text="the same config as config.pbtxt text")


class ConfigChangeSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="e.g. dynamic_batching.max_queue_delay_microseconds")
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class ConfigCheckSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    version = serializers.IntegerField(help_text="the version the edit was checked against")
    errors = serializers.ListField(child=serializers.CharField(), help_text="the engine's messages, naming the field")
    config = serializers.JSONField(allow_null=True, help_text="the effective config the edit makes (when valid)")
    pbtxt = serializers.CharField(allow_blank=True)
    changes = ConfigChangeSerializer(many=True)
    diff = serializers.ListField(child=serializers.CharField(allow_blank=True), help_text="unified diff lines")


@extend_schema(tags=["config"])
class ConfigView(RegistryAPIView):
    """The config the active version serves with; saving an edit of it."""

    parser_classes = [JSONParser]

    @extend_schema(responses={200: CurrentConfigSerializer, 404: ErrorSerializer, 409: ErrorSerializer})
    def get(self, request: Request, name: str) -> Response:
        version = config_edit.edited_version(lookups.get_model(name))
        return Response(CurrentConfigSerializer(config_edit.current_config(version)).data)

    @extend_schema(
        summary="Save an edited config: as a new version, or applied to the active version (reload)",
        request=ConfigSaveSerializer,
        responses={
            201: VersionDetailSerializer,
            202: VersionDetailSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        model = lookups.get_model(name)
        form = ConfigSaveSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        if data["action"] == "apply":
            version = config_edit.apply_to_version(
                request.user, model, data["text"], data["format"], server=self.server()
            )
            return Response(VersionDetailSerializer(version, context=self._context()).data, status=202)
        version = config_edit.save_as_new_version(
            request.user, model, data["text"], data["format"], data.get("notes", ""), server=self.server()
        )
        return Response(VersionDetailSerializer(version, context=self._context()).data, status=201)


@extend_schema(tags=["config"])
class ConfigValidateView(RegistryAPIView):
    """The engine's check of an edited config against the active version, as a load would check it (nothing
    loads): 200 either way, with `valid`, the engine's errors and the differences from the current config."""

    parser_classes = [JSONParser]
    permission_classes = [CanViewModels]

    @extend_schema(request=EditedConfigSerializer, responses={200: ConfigCheckSerializer, 404: ErrorSerializer})
    def post(self, request: Request, name: str) -> Response:
        version = config_edit.edited_version(lookups.get_model(name))
        form = EditedConfigSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        checked = config_edit.check_edit(request.user, version, data["text"], data["format"], server=self.server())
        return Response(ConfigCheckSerializer({**asdict(checked), "valid": checked.valid}).data)
