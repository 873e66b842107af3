"""Forms of the user and token pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

from console.accounts.roles import Role

ROLE_CHOICES = [(role.value, role.value) for role in Role]
MAX_EXPIRY_DAYS = 3650


class UserCreateForm(forms.Form):
    """A new account: name, role, and an optional password (left empty, one is generated and shown once)."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Role.VIEWER.value)
    email = forms.EmailField(required=False)
    password = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Leave empty to generate one (inference clients get none: they use tokens).",
    )


class RoleForm(forms.Form):
    """The role to give a user."""

    role = forms.ChoiceField(choices=ROLE_CHOICES)


class TokenForm(forms.Form):
    """A new API token: a name and an optional lifetime in days."""

    name = forms.CharField(max_length=100)
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_EXPIRY_DAYS, help_text="Empty: the token never expires."
    )

    def expires(self) -> datetime | None:
        """The expiry time the form asks for, or None."""
        days = self.cleaned_data.get("expires_days")
        return None if days is None else timezone.now() + timedelta(days=days)
