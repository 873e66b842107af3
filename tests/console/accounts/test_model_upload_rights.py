"""Who may upload models, and python-backend models in particular, through a DRF view using the shared rules."""

from __future__ import annotations

import pytest
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from console.accounts.permissions import CanManageModels, python_models_refusal
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db


class UploadView(APIView):
    """A stand-in for the registry's upload endpoint: manage rights, and admin-only python models."""

    permission_classes = [CanManageModels]

    def post(self, request):
        if request.data.get("backend") == "python":
            refusal = python_models_refusal(request.user)
            if refusal:
                raise PermissionDenied(refusal)
        return Response({"uploaded": True}, status=201)


def upload(user, backend: str = "onnxruntime"):
    request = APIRequestFactory().post("/upload/", {"backend": backend}, format="json")
    force_authenticate(request, user)
    return UploadView.as_view()(request)


def test_it_refuses_uploads_to_viewers_and_inference_clients(viewer, inference):
    for user in (viewer, inference):
        response = upload(user)
        assert response.status_code == 403
        assert "operator or admin" in str(response.data["detail"])


def test_it_lets_operators_upload_onnx_but_not_python(operator):
    assert upload(operator).status_code == 201
    refused = upload(operator, "python")
    assert refused.status_code == 403
    assert "only admins may upload python-backend models" in str(refused.data["detail"])


def test_it_lets_admins_upload_python_unless_disabled(settings, admin):
    assert upload(admin, "python").status_code == 201
    settings.INFERA = settings.INFERA.replace(allow_python_models=False)
    refused = upload(admin, "python")
    assert refused.status_code == 403
    assert "INFERA_ALLOW_PYTHON_MODELS=false" in str(refused.data["detail"])


def test_it_refuses_users_with_no_role(db):
    assert upload(make_user("nobody", None)).status_code == 403


def test_the_registry_api_refuses_a_viewer_token_but_lets_it_read(viewer, inference):
    _, viewer_key = issue_token(viewer, "ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {viewer_key}")
    refused = client.post("/api/models/", {"name": "digits"}, format="json")
    assert refused.status_code == 403
    assert "operator or admin" in refused.json()["detail"]
    assert client.get("/api/models/").status_code == 200
    _, inference_key = issue_token(inference, "client")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {inference_key}")
    assert client.get("/api/models/").status_code == 403  # inference tokens serve /v2 only
