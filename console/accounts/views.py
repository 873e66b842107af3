"""User management pages for admins (/users/) and every console user's own tokens (/tokens/).

Secrets (generated passwords, new token keys) are rendered into the response of the POST that made them and never
stored anywhere else: no redirect, no message cookie, and `Cache-Control: no-store`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_POST

from console.accounts.budget_views import budget_form
from console.accounts.forms import USER_COLUMNS, USER_SORT_KEYS, RoleForm, TokenForm, UserCreateForm, UserFilterForm
from console.accounts.models import ApiToken
from console.accounts.permissions import role_required
from console.accounts.roles import Role, assigned_role
from console.accounts.tokens import issue_token
from console.accounts.user_admin import AccountRuleError, change_role, create_user, reset_password, set_active
from console.listing import SortOrder

admin_only = role_required(Role.ADMIN)
console_user = role_required()


def _secret_page(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    response = render(request, template, context)
    add_never_cache_headers(response)  # the page holds a secret: no browser or proxy may keep it
    return response


def _user_rows() -> list[Any]:
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    users = users.annotate(active_tokens=Count("api_tokens", filter=Q(api_tokens__revoked_at__isnull=True)))
    rows = list(users)
    for user in rows:
        user.role = assigned_role(user)
    return rows


@admin_only
@sensitive_post_parameters("password")
def user_list(request: HttpRequest) -> HttpResponse:
    """Every account with its role, state and token count; POST creates one."""
    form = UserCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = create_user(
                data["username"], data["role"], data["password"] or None, data["email"], actor=request.user
            )
        except AccountRuleError as refused:
            form.add_error(None, str(refused))
        else:
            return _secret_page(
                request,
                "accounts/user_detail.html",
                {**_detail_context(created.user), "new_password": created.generated_password, "created": True},
            )
    listed = UserFilterForm(request.GET)
    order = SortOrder(request.GET, USER_COLUMNS, "user")
    users = order.sort([row for row in _user_rows() if listed.matches(row)], USER_SORT_KEYS)
    return render(
        request,
        "accounts/user_list.html",
        {"users": users, "form": form, "roles": list(Role), "filters": listed, "order": order},
    )


def _detail_context(target: Any, **extra: Any) -> dict[str, Any]:
    return {
        "target": target,
        "target_role": assigned_role(target),
        "tokens": target.api_tokens.all(),
        "role_form": RoleForm(initial={"role": assigned_role(target)}),
        "token_form": TokenForm(),
        "budget_form": budget_form(target),
        "roles": list(Role),
        **extra,
    }


@admin_only
@require_GET
def user_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One account: role, state, password reset and its tokens."""
    return render(request, "accounts/user_detail.html", _detail_context(_target(pk)))


def _target(pk: int) -> Any:
    return get_object_or_404(get_user_model(), pk=pk)


def _refused_or_done(request: HttpRequest, pk: int, action: Any, done: str) -> HttpResponse:
    try:
        action()
    except AccountRuleError as refused:
        messages.error(request, str(refused))
    else:
        messages.success(request, done)
    return redirect("accounts:user-detail", pk=pk)


@admin_only
@require_POST
def user_role(request: HttpRequest, pk: int) -> HttpResponse:
    """Give the user another role."""
    target = _target(pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "choose one of the roles: " + ", ".join(role.value for role in Role))
        return redirect("accounts:user-detail", pk=pk)
    role = form.cleaned_data["role"]
    return _refused_or_done(
        request, pk, lambda: change_role(request.user, target, role), f"'{target.get_username()}' is now {role}"
    )


@admin_only
@require_POST
def user_active(request: HttpRequest, pk: int) -> HttpResponse:
    """Deactivate (active=0) or reactivate (active=1) the user."""
    target = _target(pk)
    active = request.POST.get("active") == "1"
    word = "reactivated" if active else "deactivated"
    return _refused_or_done(
        request, pk, lambda: set_active(request.user, target, active), f"'{target.get_username()}' {word}"
    )


@admin_only
@require_POST
def user_password(request: HttpRequest, pk: int) -> HttpResponse:
    """Give the user a new generated password, shown once."""
    target = _target(pk)
    password = reset_password(target, actor=request.user)
    return _secret_page(request, "accounts/user_detail.html", _detail_context(target, new_password=password))


@admin_only
@require_POST
def user_token_create(request: HttpRequest, pk: int) -> HttpResponse:
    """Issue a token for the user; the key is shown once."""
    target = _target(pk)
    return _token_create(request, target, "accounts/user_detail.html", lambda **extra: _detail_context(target, **extra))


@admin_only
@require_POST
def user_token_revoke(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    """Revoke one of the user's tokens."""
    token = get_object_or_404(ApiToken, pk=token_pk, user_id=pk)
    token.revoke(actor=request.user)
    messages.success(request, f"token '{token.name}' revoked")
    return redirect("accounts:user-detail", pk=pk)


def _token_create(request: HttpRequest, owner: Any, template: str, context: Any) -> HttpResponse:
    form = TokenForm(request.POST)
    if not form.is_valid():
        return render(request, template, context(token_form=form), status=400)
    issued = issue_token(owner, form.cleaned_data["name"], form.expires(), actor=request.user)
    return _secret_page(request, template, context(new_key=issued.key, new_token=issued.token))


def _own_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    return {"tokens": request.user.api_tokens.all(), "token_form": TokenForm(), **extra}


@console_user
def own_tokens(request: HttpRequest) -> HttpResponse:
    """The signed-in user's API tokens; POST issues one (the key is shown once)."""
    if request.method == "POST":
        return _token_create(
            request, request.user, "accounts/own_tokens.html", lambda **extra: _own_context(request, **extra)
        )
    return render(request, "accounts/own_tokens.html", _own_context(request))


@console_user
@require_POST
def own_token_revoke(request: HttpRequest, token_pk: int) -> HttpResponse:
    """Revoke one of the signed-in user's tokens."""
    token = get_object_or_404(ApiToken, pk=token_pk, user=request.user)
    token.revoke(actor=request.user)
    messages.success(request, f"token '{token.name}' revoked")
    return redirect("accounts:own-tokens")
