"""Path matching for Triton's HTTP endpoints."""

from __future__ import annotations

import pytest

from engine.errors import InvalidArgument
from engine.frontend.routes import Route, parse_version, resolve


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v2", Route("server_metadata", "GET")),
        ("/v2/", Route("server_metadata", "GET")),
        ("/v2/health/live", Route("health_live", "GET")),
        ("/v2/health/ready", Route("health_ready", "GET")),
        ("/v2/models/stats", Route("stats", "GET")),
        ("/v2/models/simple", Route("model_metadata", "GET", "simple")),
        ("/v2/models/simple/versions/3", Route("model_metadata", "GET", "simple", "3")),
        ("/v2/models/simple/ready", Route("model_ready", "GET", "simple")),
        ("/v2/models/simple/versions/2/config", Route("model_config", "GET", "simple", "2")),
        ("/v2/models/simple/stats", Route("model_stats", "GET", "simple")),
        ("/v2/models/simple/versions/1/stats", Route("model_stats", "GET", "simple", "1")),
        ("/v2/models/simple/infer", Route("infer", "POST", "simple")),
        ("/v2/models/simple/versions/x/infer", Route("infer", "POST", "simple", "x")),
        ("/v2/models/gen/generate", Route("generate", "POST", "gen")),
        ("/v2/models/gen/versions/2/generate_stream", Route("generate_stream", "POST", "gen", "2")),
        ("/v2/repository/index", Route("repository_index", "POST")),
        ("/v2/repository/models/simple/load", Route("repository_load", "POST", "simple")),
        ("/v2/repository/models/simple/unload", Route("repository_unload", "POST", "simple")),
    ],
)
def test_it_resolves_every_triton_path(path, route):
    assert resolve(path) == route


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v1/models",
        "/v2/models",
        "/v2/health",
        "/v2/models/m/versions",
        "/v2/models/m/explain",
        "/v2/models/m/versions/1/infer/x",
        "/v2/repository/models/m",
        "/v2/repository/models/m/delete",
        "/v22",
    ],
)
def test_it_finds_no_route_for_other_paths(path):
    assert resolve(path) is None


def test_it_parses_numeric_versions_only():
    assert parse_version(None) is None
    assert parse_version("12") == 12
    for text in ("abc", "-1", "1.5", "\u0663"):
        with pytest.raises(InvalidArgument, match=f"model version '{text}' is not a positive integer"):
            parse_version(text)
