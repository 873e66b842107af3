"""The management API for models and versions: each view validates with a serializer and makes one domain call."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from console.accounts.permissions import CanManageModels
from console.accounts.tokens import TokenAuthentication
from console.parsers import JSONParser
from console.registry.engine_status import engine_traffic
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.serializers import (
    ModelCreateSerializer,
    ModelUpdateSerializer,
    RegisteredModelDetailSerializer,
    RegisteredModelSerializer,
    TrafficPolicySerializer,
    TrafficSerializer,
    VersionDetailSerializer,
    VersionSerializer,
    VersionUploadedSerializer,
    VersionUploadSerializer,
)
from console.registry.services import lookups, model_actions, new_versions, refusals, traffic_actions, version_actions
from console.registry.uploads import max_upload_bytes, too_large
from console.runtime_of import runtime_of
from engine.api import InferenceServer

# room for the multipart framing, the notes and a config beside the file itself
MULTIPART_SLACK_BYTES = 2 * 1024 * 1024

ErrorSerializer = inline_serializer("RegistryError", {"detail": serializers.CharField()})
UploadErrorSerializer = inline_serializer(
    "UploadError", {"detail": serializers.CharField(), "version": VersionDetailSerializer(required=False)}
)
InUseErrorSerializer = inline_serializer(
    "InUseError",
    {
        "detail": serializers.CharField(),
        "ensembles": serializers.ListField(
            child=serializers.CharField(), required=False, help_text="the registered ensembles that call it"
        ),
    },
)


def _authentication_classes() -> list[type]:
    """The project's authentication plus API tokens (`Authorization: Token <key>` or `Bearer <key>`)."""
    classes = list(api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    return classes if TokenAuthentication in classes else [TokenAuthentication, *classes]


class RegistryAPIView(APIView):
    """Base: token or session auth, role rules, and registry refusals answered with their status and reason."""

    authentication_classes = _authentication_classes()
    permission_classes = [CanManageModels]

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, refusals.RegistryError):
            body: dict[str, Any] = {"detail": exc.message}
            if "version" in exc.extra:
                body["version"] = VersionDetailSerializer(exc.extra["version"], context=self._context()).data
            if "ensembles" in exc.extra:
                body["ensembles"] = exc.extra["ensembles"]
            return Response(body, status=exc.status)
        if isinstance(exc, DjangoValidationError):
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)

    def _context(self) -> dict[str, Any]:
        return {"request": self.request, "view": self}

    def server(self) -> InferenceServer | None:
        """The engine of the serving process this request reached, whose door admits versions (lookups.admitting);
        None outside one."""
        runtime = runtime_of(self.request)
        return runtime.server if runtime is not None else None

    def version(self, name: str, number: str) -> ModelVersion:
        if not (number.isascii() and number.isdigit()):
            raise refusals.RegistryError(f"a version is a whole number, got '{number}'")
        return lookups.get_version(name, int(number))


@extend_schema(tags=["models"])
class ModelListView(RegistryAPIView):
    """Registered models, and registering a new one."""

    @extend_schema(responses=RegisteredModelSerializer(many=True))
    def get(self, request: Request) -> Response:
        models = RegisteredModel.objects.select_related("active_version", "created_by").prefetch_related("versions")
        return Response(RegisteredModelSerializer(models, many=True, context=self._context()).data)

    @extend_schema(
        request=ModelCreateSerializer, responses={201: RegisteredModelDetailSerializer, 409: ErrorSerializer}
    )
    def post(self, request: Request) -> Response:
        form = ModelCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        model = model_actions.register_model(request.user, **form.validated_data)
        return Response(RegisteredModelDetailSerializer(model, context=self._context()).data, status=201)


@extend_schema(tags=["models"])
class ModelDetailView(RegistryAPIView):
    """One model with its versions; change its description; delete it with every version."""

    @extend_schema(responses={200: RegisteredModelDetailSerializer, 404: ErrorSerializer})
    def get(self, request: Request, name: str) -> Response:
        return Response(RegisteredModelDetailSerializer(lookups.get_model(name), context=self._context()).data)

    @extend_schema(request=ModelUpdateSerializer, responses={200: RegisteredModelDetailSerializer})
    def patch(self, request: Request, name: str) -> Response:
        model = lookups.get_model(name)
        form = ModelUpdateSerializer(data=request.data, context={"name": name})
        form.is_valid(raise_exception=True)
        changes = {
            key: form.validated_data[key]
            for key in ("description", "on_demand", "pinned")
            if key in form.validated_data
        }
        model = model_actions.update_model(request.user, model, **changes)
        return Response(RegisteredModelDetailSerializer(model, context=self._context()).data)

    @extend_schema(responses={204: None, 404: ErrorSerializer, 409: InUseErrorSerializer})
    def delete(self, request: Request, name: str) -> Response:
        model_actions.delete_model(request.user, lookups.get_model(name))
        return Response(status=204)


@extend_schema(tags=["versions"])
class VersionListView(RegistryAPIView):
    """A model's versions, and uploading a new one (checked and trial-loaded before it is stored)."""

    parser_classes = [MultiPartParser, FormParser, JSONParser]

    @extend_schema(responses={200: VersionSerializer(many=True), 404: ErrorSerializer})
    def get(self, request: Request, name: str) -> Response:
        versions = lookups.get_model(name).versions.select_related("model", "uploaded_by")
        return Response(VersionSerializer(versions, many=True, context=self._context()).data)

    @extend_schema(
        request={"multipart/form-data": VersionUploadSerializer},
        responses={
            201: VersionUploadedSerializer,
            400: UploadErrorSerializer,
            403: ErrorSerializer,
            413: ErrorSerializer,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        model = lookups.get_model(name)
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isascii() and length.isdigit() and int(length) > max_upload_bytes() + MULTIPART_SLACK_BYTES:
            raise refusals.RegistryError(too_large(int(length)).message, 413)  # refused before the body is read
        form = VersionUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        uploaded = new_versions.upload_versions(request.user, model, server=self.server(), **form.validated_data)
        context = {**self._context(), "companions": uploaded.companions}
        return Response(VersionUploadedSerializer(uploaded.version, context=context).data, status=201)


@extend_schema(tags=["versions"])
class VersionDetailView(RegistryAPIView):
    """One version with its effective config; deleting an inactive one."""

    @extend_schema(responses={200: VersionDetailSerializer, 404: ErrorSerializer})
    def get(self, request: Request, name: str, number: str) -> Response:
        return Response(VersionDetailSerializer(self.version(name, number), context=self._context()).data)

    @extend_schema(responses={204: None, 409: InUseErrorSerializer})
    def delete(self, request: Request, name: str, number: str) -> Response:
        version_actions.delete_version(request.user, self.version(name, number))
        return Response(status=204)


class VersionActionView(RegistryAPIView):
    """A change of desired state on one version; the reconciler acts on it, hence 202."""

    change = staticmethod(version_actions.activate)

    @extend_schema(request=None, responses={202: VersionDetailSerializer, 404: ErrorSerializer, 409: ErrorSerializer})
    def post(self, request: Request, name: str, number: str) -> Response:
        version = type(self).change(request.user, self.version(name, number))
        return Response(VersionDetailSerializer(version, context=self._context()).data, status=202)


@extend_schema(tags=["versions"], summary="Activate a READY version (roll forward or back)")
class VersionActivateView(VersionActionView):
    change = staticmethod(version_actions.activate)


@extend_schema(tags=["versions"], summary="Load a version (a FAILED one is retried)")
class VersionLoadView(VersionActionView):
    change = staticmethod(version_actions.load_version)


@extend_schema(tags=["versions"], summary="Unload a version that is not the active one")
class VersionUnloadView(VersionActionView):
    change = staticmethod(version_actions.unload_version)


def traffic_of(model: RegisteredModel, context: dict[str, Any]) -> dict[str, Any]:
    """A model's traffic as the API shows it: the desired policy, and what this process's engine applies and saw."""
    policy = lookups.traffic_policy_of(model)
    in_force = engine_traffic(model.name, context)
    ready = model.versions.filter(state=VersionState.READY).values_list("number", flat=True)
    return TrafficSerializer(
        {
            "model": model.name,
            "active_version": model.active_number,
            "ready_versions": sorted(ready),
            "policy": policy.to_dict(),
            "promotion_candidate": traffic_actions.promotion_candidate(policy, model.active_number),
            "in_force": in_force["policy"] if in_force else None,
            "rolled_back": in_force["rolled_back"] if in_force else "",
            "shadow": in_force["shadow"] if in_force else None,
        }
    ).data


@extend_schema(tags=["traffic"])
class TrafficView(RegistryAPIView):
    """A model's traffic policy: all to the active version, a weighted canary, or shadow copies to a candidate."""

    parser_classes = [JSONParser]

    @extend_schema(responses={200: TrafficSerializer, 404: ErrorSerializer})
    def get(self, request: Request, name: str) -> Response:
        return Response(traffic_of(lookups.get_model(name), self._context()))

    @extend_schema(
        summary="Set the traffic policy (the reconciler puts it in force once its versions are READY)",
        request=TrafficPolicySerializer,
        responses={202: TrafficSerializer, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def put(self, request: Request, name: str) -> Response:
        model = lookups.get_model(name)
        form = TrafficPolicySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        model = traffic_actions.set_traffic_policy(request.user, model, form.validated_data)
        return Response(traffic_of(model, self._context()), status=202)


class TrafficActionView(RegistryAPIView):
    """A change of a model's traffic; the reconciler acts on it, hence 202."""

    change = staticmethod(traffic_actions.rollback_traffic)

    @extend_schema(
        request=None,
        responses={202: TrafficSerializer, 403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def post(self, request: Request, name: str) -> Response:
        model = type(self).change(request.user, lookups.get_model(name))
        return Response(traffic_of(model, self._context()), status=202)


@extend_schema(tags=["traffic"], summary="Promote the candidate: it becomes the active version and takes every request")
class TrafficPromoteView(TrafficActionView):
    """For a canary the version with the highest weight that is not active, for a shadow its candidate; the policy
    returns to active. 409 when the policy has no candidate."""

    change = staticmethod(traffic_actions.promote_traffic)


@extend_schema(tags=["traffic"], summary="Roll back: every request goes to the active version again")
class TrafficRollbackView(TrafficActionView):
    """The canary or shadow ends; the active version stays. 409 when the policy is already active."""

    change = staticmethod(traffic_actions.rollback_traffic)
