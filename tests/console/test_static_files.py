"""Static files come from the ASGI process itself, plotly.js straight from the installed plotly package."""

from __future__ import annotations

from django.test import AsyncClient

from console.static_serving import plotly_bundle_path


async def body_of(response: object) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])  # type: ignore[attr-defined]


async def test_it_serves_plotly_from_the_installed_package(async_client: AsyncClient):
    response = await async_client.get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    assert response["Content-Type"] in {"text/javascript", "application/javascript"}
    assert await body_of(response) == plotly_bundle_path().read_bytes()


async def test_it_serves_the_console_stylesheet_and_admin_assets(async_client: AsyncClient):
    for path in ("/static/console/console.css", "/static/admin/css/base.css"):
        response = await async_client.get(path)
        assert response.status_code == 200, path
        assert response["Cache-Control"] == "public, max-age=3600"
        assert len(await body_of(response)) > 100


async def test_it_answers_404_for_a_missing_file(async_client: AsyncClient):
    response = await async_client.get("/static/console/nothing-here.css")
    assert response.status_code == 404
