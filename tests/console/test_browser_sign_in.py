"""Signing in at /accounts/login/ in headless Chromium, against a real `manage.py serve`."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.server]


def test_it_signs_in_as_admin_and_lands_on_the_home_page(infera_server: ServerProcess, page):
    page.goto(infera_server.base_url + "/accounts/login/")
    page.fill("input[name=username]", infera_server.admin_username)
    page.fill("input[name=password]", infera_server.admin_password)
    page.click("button[type=submit]")
    page.wait_for_url(infera_server.base_url + "/")
    assert page.locator("h1").inner_text() == "Overview"
    assert page.locator("nav").inner_text().count("Sign out admin") == 1
    assert page.locator("#engine-state").is_visible()


def test_it_says_so_when_the_password_is_wrong(infera_server: ServerProcess, page):
    page.goto(infera_server.base_url + "/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    alert = page.locator("[role=alert]")
    alert.wait_for()
    assert "correct username and password" in alert.inner_text()
    assert page.url.startswith(infera_server.base_url + "/accounts/login/")
