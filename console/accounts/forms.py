"""Forms of the user and token pages."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from console.accounts.roles import ROLE_RANK, Role
from console.listing import Column

ROLE_CHOICES = [(role.value, role.value) for role in Role]
MAX_EXPIRY_DAYS = 3650
NO_ROLE = "none"

USER_COLUMNS = (
    Column("user", "User"),
    Column("role", "Role"),
    Column("state", "State"),
    Column("tokens", "Active tokens"),
    Column("last_login", "Last sign-in"),
)
# how each column sorts the rows of the user list (console/accounts/views.py _user_rows)
USER_SORT_KEYS = {
    "user": lambda row: row.username.lower(),
    "role": lambda row: ROLE_RANK.index(row.role) if row.role else None,  # admin first
    "state": lambda row: not row.is_active,
    "tokens": lambda row: row.active_tokens,
    "last_login": lambda row: row.last_login,
}


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


class UserFilterForm(forms.Form):
    """The user list narrowed by a word of the name or email, a role, active or deactivated."""

    q = forms.CharField(required=False, max_length=150, label="Name or email")
    role = forms.ChoiceField(
        required=False, label="Role", choices=[("", "any role"), *ROLE_CHOICES, (NO_ROLE, "no role")]
    )
    state = forms.ChoiceField(
        required=False, label="State", choices=[("", "any state"), ("active", "active"), ("deactivated", "deactivated")]
    )

    @property
    def active(self) -> bool:
        return self.is_bound and any(self.data.get(name) for name in self.fields)

    def matches(self, row: Any) -> bool:
        """Whether a user row (with its `role`) passes the valid filters; an invalid form passes nobody."""
        if not self.is_valid():
            return False
        data = self.cleaned_data
        word = data["q"].lower()
        if word and word not in row.username.lower() and word not in (row.email or "").lower():
            return False
        role = row.role.value if row.role else NO_ROLE
        if data["role"] and data["role"] != role:
            return False
        return not data["state"] or (data["state"] == "active") == row.is_active
