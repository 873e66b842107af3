"""The budgets API: /api/users/<pk>/budget/ and /api/tokens/<pk>/budget/, read and set by admins only."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.accounts.api import AccountsApi
from console.accounts.budgets import limits_of, set_limits
from console.accounts.models import ApiToken
from console.accounts.permissions import IsAdmin


class BudgetSerializer(serializers.Serializer):
    """A budget's limits; null (or absent from a PATCH) leaves a limit unset (or as it was)."""

    tokens_per_minute = serializers.IntegerField(min_value=1, max_value=2**31 - 1, allow_null=True, required=False)
    concurrent_streams = serializers.IntegerField(min_value=1, max_value=2**31 - 1, allow_null=True, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=2**31 - 1, allow_null=True, required=False)


class BudgetApi(AccountsApi):
    """One owner's budget: GET it, PUT all three limits (an absent one is cleared), PATCH some."""

    permission_classes = [IsAdmin]
    serializer_class = BudgetSerializer

    def owner(self) -> Any:
        """The user or token whose budget this is (404 when none)."""
        raise NotImplementedError

    @extend_schema(responses=BudgetSerializer)
    def get(self, request: Request, pk: int) -> Response:
        return Response(limits_of(self.owner()))

    @extend_schema(request=BudgetSerializer, responses=BudgetSerializer)
    def put(self, request: Request, pk: int) -> Response:
        return self._set(request, partial=False)

    @extend_schema(request=BudgetSerializer, responses=BudgetSerializer)
    def patch(self, request: Request, pk: int) -> Response:
        return self._set(request, partial=True)

    def _set(self, request: Request, partial: bool) -> Response:
        incoming = BudgetSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        limits = dict(incoming.validated_data)
        if not partial:
            limits = {name: limits.get(name) for name in BudgetSerializer().fields}
        return Response(set_limits(request.user, self.owner(), limits))


class UserBudgetApi(BudgetApi):
    """A user's budget, across all of the user's tokens (admins)."""

    def get_queryset(self) -> Any:
        return get_user_model().objects.all()

    def owner(self) -> Any:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])


class TokenBudgetApi(BudgetApi):
    """Any API token's budget (admins)."""

    def get_queryset(self) -> Any:
        return ApiToken.objects.select_related("user")

    def owner(self) -> Any:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])
