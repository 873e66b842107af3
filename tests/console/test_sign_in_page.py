"""The sign-in page at /accounts/login/ (Django's auth views) and the home page behind it."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_it_renders_username_and_password_fields(client: Client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'<input[^>]+name="username"', html)
    assert re.search(r'<input[^>]+type="password"[^>]+name="password"', html)
    assert 'name="csrfmiddlewaretoken"' in html


def test_it_sends_visitors_to_sign_in_first(client: Client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_it_signs_in_and_shows_the_home_page(client: Client, django_user_model: type):
    django_user_model.objects.create_user("ada", password="correct horse battery")
    response = client.post("/accounts/login/", {"username": "ada", "password": "correct horse battery"})
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200
    assert "Sign out ada" in home.content.decode()
    assert 'id="engine-state"' in home.content.decode()


def test_it_refuses_a_wrong_password_with_a_message(client: Client, django_user_model: type):
    django_user_model.objects.create_user("ada", password="correct horse battery")
    response = client.post("/accounts/login/", {"username": "ada", "password": "wrong"})
    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()
