"""The users API (/api/users/, admins) and the own-tokens API (/api/tokens/, any console role)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from console.accounts.models import ApiToken
from console.accounts.permissions import HasConsoleRole, IsAdmin
from console.accounts.serializers import (
    TokenCreatedSerializer,
    TokenCreateSerializer,
    TokenSerializer,
    UserCreatedSerializer,
    UserCreateSerializer,
    UserSerializer,
    UserUpdateSerializer,
)
from console.accounts.throttling import TokenRateThrottle
from console.accounts.tokens import TokenAuthentication, issue_token
from console.accounts.user_admin import AccountRuleError, change_role, create_user, delete_user, set_active


@extend_schema(tags=["accounts"])
class AccountsApi(GenericAPIView):
    """Common policy: tokens or sessions, throttled per token."""

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    throttle_classes = [TokenRateThrottle]


def _refused(error: AccountRuleError) -> ValidationError:
    return ValidationError({"detail": str(error)})


class UserListApi(AccountsApi):
    """List accounts, or create one (admins)."""

    permission_classes = [IsAdmin]
    serializer_class = UserSerializer

    def get_queryset(self) -> Any:
        return get_user_model().objects.order_by("username")

    @extend_schema(operation_id="users_list", responses=UserSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(UserSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=UserCreateSerializer, responses={201: UserCreatedSerializer})
    def post(self, request: Request) -> Response:
        incoming = UserCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            created = create_user(
                data["username"], data["role"], data.get("password"), data.get("email", ""), actor=request.user
            )
        except AccountRuleError as refused:
            raise _refused(refused) from None
        created.user.generated_password = created.generated_password
        return Response(UserCreatedSerializer(created.user).data, status=status.HTTP_201_CREATED)


class UserDetailApi(AccountsApi):
    """Read, change (role, is_active) or delete one account (admins)."""

    permission_classes = [IsAdmin]
    serializer_class = UserSerializer

    def get_object(self) -> Any:
        return get_object_or_404(get_user_model(), pk=self.kwargs["pk"])

    def get(self, request: Request, pk: int) -> Response:
        return Response(UserSerializer(self.get_object()).data)

    @extend_schema(request=UserUpdateSerializer, responses={200: UserSerializer})
    def patch(self, request: Request, pk: int) -> Response:
        target = self.get_object()
        incoming = UserUpdateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            if "role" in data:
                change_role(request.user, target, data["role"])
            if "is_active" in data:
                set_active(request.user, target, data["is_active"])
        except AccountRuleError as refused:
            raise _refused(refused) from None
        return Response(UserSerializer(get_user_model().objects.get(pk=target.pk)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        try:
            delete_user(request.user, self.get_object())
        except AccountRuleError as refused:
            raise _refused(refused) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenListApi(AccountsApi):
    """The caller's own tokens; POST issues one and answers its key, once."""

    permission_classes = [HasConsoleRole]
    serializer_class = TokenSerializer

    def get_queryset(self) -> Any:
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(operation_id="tokens_list", responses=TokenSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(TokenSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenCreatedSerializer})
    def post(self, request: Request) -> Response:
        incoming = TokenCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        days = incoming.validated_data.get("expires_days")
        expires = None if days is None else timezone.now() + timedelta(days=days)
        token, key = issue_token(request.user, incoming.validated_data["name"], expires)
        token.key = key
        response = Response(TokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response


class TokenDetailApi(AccountsApi):
    """One of the caller's tokens; DELETE revokes it (it stays listed as revoked)."""

    permission_classes = [HasConsoleRole]
    serializer_class = TokenSerializer

    def get_object(self) -> ApiToken:
        return get_object_or_404(ApiToken, pk=self.kwargs["pk"], user=self.request.user)

    def get(self, request: Request, pk: int) -> Response:
        return Response(TokenSerializer(self.get_object()).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        self.get_object().revoke(actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
