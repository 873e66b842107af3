"""The console's icon: named by every console page, and /favicon.ico (asked for by the admin's and Swagger's pages,
which name none) leads to it instead of a 404 in the log."""

from __future__ import annotations

from django.test import AsyncClient


async def test_it_sends_favicon_ico_to_the_consoles_icon(async_client: AsyncClient):
    response = await async_client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/console/favicon.svg"
    icon = await async_client.get(response["Location"])
    assert icon.status_code == 200
    assert b"".join([chunk async for chunk in icon.streaming_content]).startswith(b"<svg")
