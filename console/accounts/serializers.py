"""Serializers of the users and tokens API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import serializers

from console.accounts.forms import MAX_EXPIRY_DAYS
from console.accounts.models import ApiToken
from console.accounts.roles import Role, assigned_role

ROLE_VALUES = [role.value for role in Role]


class UserSerializer(serializers.ModelSerializer):
    """An account as the API shows it."""

    role = serializers.SerializerMethodField()
    active_tokens = serializers.SerializerMethodField()

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "role", "is_active", "date_joined", "last_login", "active_tokens"]
        read_only_fields = fields

    def get_role(self, user: Any) -> str | None:
        role = assigned_role(user)
        return None if role is None else role.value

    def get_active_tokens(self, user: Any) -> int:
        return user.api_tokens.filter(revoked_at__isnull=True).count()


class UserCreateSerializer(serializers.Serializer):
    """A new account; without a password console roles get a generated one (returned once)."""

    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=ROLE_VALUES)
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    password = serializers.CharField(required=False, write_only=True, trim_whitespace=False)


class UserCreatedSerializer(UserSerializer):
    """The account just made, with the generated password when there is one."""

    generated_password = serializers.CharField(allow_null=True, read_only=True)

    class Meta(UserSerializer.Meta):
        fields = [*UserSerializer.Meta.fields, "generated_password"]
        read_only_fields = fields


class UserUpdateSerializer(serializers.Serializer):
    """A change of role and/or active state."""

    role = serializers.ChoiceField(choices=ROLE_VALUES, required=False)
    is_active = serializers.BooleanField(required=False)


class TokenSerializer(serializers.ModelSerializer):
    """An API token as listed: never its key."""

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created", "expires", "last_used", "revoked_at", "status"]
        read_only_fields = fields

    status = serializers.CharField(read_only=True)


class TokenCreateSerializer(serializers.Serializer):
    """A new token: name and an optional lifetime in days."""

    name = serializers.CharField(max_length=100)
    expires_days = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_EXPIRY_DAYS)


class TokenCreatedSerializer(TokenSerializer):
    """The token just issued, with its key: the only time the key is sent."""

    key = serializers.CharField(read_only=True)

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
        read_only_fields = fields
