"""The sign-in page as an async view, so password hashing runs in parallel instead of one sign-in at a time.

Under ASGI Django runs every synchronous view on one shared thread; a password check costs a fraction of a second
of PBKDF2 (for unknown names too, so their answer takes as long), so twenty simultaneous sign-ins took twenty times
that. Here the hash is computed on a worker thread of its own, with no database access there (the stored hash is
read first); Django's form and backend then decide with that verdict, so locks, signals and messages stay Django's.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import login as auth_login
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters

from console.accounts.login_throttle import (
    PASSWORD_CHECKED,
    ThrottledAuthenticationForm,
    password_matches,
    stored_password,
)

TEMPLATE = "registration/login.html"


def _safe_next(request: HttpRequest) -> str:
    wanted = request.POST.get(REDIRECT_FIELD_NAME, request.GET.get(REDIRECT_FIELD_NAME, ""))
    allowed = url_has_allowed_host_and_scheme(wanted, {request.get_host()}, require_https=request.is_secure())
    return wanted if allowed else ""


@sensitive_post_parameters()
@csrf_protect
@never_cache
async def sign_in(request: HttpRequest) -> HttpResponse:
    """GET shows Django's login page; POST checks the password off the shared thread."""
    if request.method != "POST":
        view = LoginView.as_view(redirect_authenticated_user=True, authentication_form=ThrottledAuthenticationForm)
        return await sync_to_async(view)(request)
    form = ThrottledAuthenticationForm(request, data=request.POST)
    username, password = request.POST.get("username"), request.POST.get("password")
    if isinstance(username, str) and isinstance(password, str) and username and password:
        encoded = await sync_to_async(stored_password)(username)
        matches = await sync_to_async(password_matches, thread_sensitive=False)(password, encoded)
        setattr(request, PASSWORD_CHECKED, (username, matches))
    valid = await sync_to_async(form.is_valid)()
    if valid:
        await sync_to_async(auth_login)(request, form.get_user())
        return HttpResponseRedirect(_safe_next(request) or resolve_url(settings.LOGIN_REDIRECT_URL))
    return await sync_to_async(_render)(request, form)


def _render(request: HttpRequest, form: ThrottledAuthenticationForm) -> HttpResponse:
    from django.shortcuts import render

    return render(request, TEMPLATE, {"form": form, REDIRECT_FIELD_NAME: _safe_next(request)})
