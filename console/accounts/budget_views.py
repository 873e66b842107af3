"""The budget forms of the user page (/users/<pk>/budget/) and a token's page (/users/<pk>/tokens/<token>/), admins'."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.accounts.budgets import limits_of, set_limits
from console.accounts.models import ApiToken
from console.accounts.permissions import role_required
from console.accounts.roles import Role

admin_only = role_required(Role.ADMIN)
LIMIT = 2**31 - 1


class BudgetForm(forms.Form):
    """Three limits, each empty (no limit) or a whole number from 1."""

    tokens_per_minute = forms.IntegerField(min_value=1, max_value=LIMIT, required=False, label="Tokens per minute")
    concurrent_streams = forms.IntegerField(min_value=1, max_value=LIMIT, required=False, label="Concurrent requests")
    max_tokens = forms.IntegerField(min_value=1, max_value=LIMIT, required=False, label="max_tokens ceiling")


def budget_form(owner: Any) -> BudgetForm:
    """The form filled with an owner's limits as set."""
    return BudgetForm(initial=limits_of(owner))


def _save(request: HttpRequest, owner: Any, form: BudgetForm, what: str) -> bool:
    if not form.is_valid():
        return False
    try:
        set_limits(request.user, owner, form.cleaned_data)
    except ValidationError as refused:
        form.add_error(None, refused)
        return False
    messages.success(request, f"budget of {what} saved: it applies to the next request on every replica")
    return True


@admin_only
@require_POST
def user_budget(request: HttpRequest, pk: int) -> HttpResponse:
    """Set a user's budget (across all of the user's tokens)."""
    from django.contrib.auth import get_user_model

    target = get_object_or_404(get_user_model(), pk=pk)
    if not _save(request, target, BudgetForm(request.POST), f"'{target.get_username()}'"):
        messages.error(request, "a budget's limits are empty or whole numbers from 1")
    return redirect("accounts:user-detail", pk=pk)


@admin_only
def token_budget(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    """A token's page: what it is and its budget; POST sets the budget."""
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_pk, user_id=pk)
    form = BudgetForm(request.POST) if request.method == "POST" else budget_form(token)
    if request.method == "POST" and _save(request, token, form, f"token '{token.name}'"):
        return redirect("accounts:token-budget", pk=pk, token_pk=token_pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "accounts/token_detail.html", {"token": token, "budget_form": form}, status=status)
