"""Django admin: API tokens (never their keys), and the user admin guarding the last active admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from console.accounts.models import ApiToken
from console.accounts.roles import Role
from console.accounts.user_admin import AccountRuleError, active_admins, check_deletable, is_last_active_admin


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are listed and revoked here; they are issued on /users/ or with `manage.py issue_token`."""

    list_display = ["name", "user", "prefix", "created", "expires", "last_used", "revoked_at"]
    list_filter = ["revoked_at", "expires"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["user", "prefix", "key_hash", "created", "last_used"]
    fields = ["user", "name", "prefix", "created", "expires", "last_used", "revoked_at"]
    actions = ["revoke_tokens"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a key must be shown once at creation; admin forms cannot do that

    @admin.action(description="Revoke the selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: Any) -> None:
        for token in queryset:
            token.revoke(actor=request.user)
        self.message_user(request, f"{queryset.count()} token(s) revoked", messages.SUCCESS)


class GuardedUserChangeForm(UserChangeForm):
    """Django's user change form, refusing to leave the server without an active admin."""

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        user = self.instance
        groups = data.get("groups") or []
        stays_admin = data.get("is_active", user.is_active) and (
            data.get("is_superuser", user.is_superuser) or any(group.name == Role.ADMIN.value for group in groups)
        )
        if not stays_admin and is_last_active_admin(user):
            raise ValidationError(f"'{user.get_username()}' is the last active admin; keep it an active admin")
        return data


class GuardedUserAdmin(UserAdmin):
    """Django's user admin, refusing to demote, deactivate or delete the last active admin."""

    form = GuardedUserChangeForm

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        try:
            check_deletable(obj)
        except AccountRuleError as refused:
            self.message_user(request, str(refused), messages.ERROR)
            return
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        if not active_admins().exclude(pk__in=queryset.values("pk")).exists():
            self.message_user(request, "that would delete every active admin; nothing was deleted", messages.ERROR)
            return
        super().delete_queryset(request, queryset)


users = get_user_model()
if admin.site.is_registered(users):
    admin.site.unregister(users)
admin.site.register(users, GuardedUserAdmin)
