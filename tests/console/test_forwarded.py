"""The client's own address behind a trusted load balancer (INFERA_TRUSTED_PROXIES): X-Forwarded-For read from the
right and only from trusted peers, so the sign-in lockout tells clients behind one balancer apart and a client's
own claims change nothing."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from console.config import read_settings
from console.env import EnvError
from console.forwarded import ForwardedHeaders, forwarded_client, trusted_networks
from tests.conftest import ServerProcess, serve_process

BALANCERS = trusted_networks(["127.0.0.1", "10.0.0.0/8"])


def scope_from(peer: str, *headers: tuple[bytes, bytes], kind: str = "http") -> dict:
    scope = {"type": kind, "client": (peer, 50000), "scheme": "http" if kind == "http" else "ws", "headers": headers}
    ForwardedHeaders(BALANCERS).apply(scope)
    return scope


def test_it_takes_the_right_most_address_that_is_not_a_balancer():
    assert forwarded_client("203.0.113.7", "127.0.0.1", BALANCERS) == "203.0.113.7"
    # the left-most entries are what the client claimed; two balancers in a row added the rest
    assert forwarded_client("198.51.100.1, 203.0.113.7, 10.1.2.3", "127.0.0.1", BALANCERS) == "203.0.113.7"


def test_it_stops_at_an_entry_that_is_no_address():
    assert forwarded_client("203.0.113.7, garbage", "127.0.0.1", BALANCERS) == "127.0.0.1"
    assert forwarded_client("[2001:db8::1]:4711", "127.0.0.1", BALANCERS) == "2001:db8::1"


def test_it_believes_only_a_trusted_peer():
    spoofed = scope_from("192.0.2.10", (b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-proto", b"https"))
    assert spoofed["client"] == ("192.0.2.10", 50000) and spoofed["scheme"] == "http"
    forwarded = scope_from("10.9.8.7", (b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-proto", b"https"))
    assert forwarded["client"] == ("203.0.113.7", 0) and forwarded["scheme"] == "https"


def test_it_reads_several_forwarded_for_headers_as_one_list_and_the_scheme_of_a_websocket():
    scope = scope_from(
        "127.0.0.1",
        (b"x-forwarded-for", b"203.0.113.7"),
        (b"x-forwarded-for", b"10.0.0.5"),
        (b"x-forwarded-proto", b"https"),
        kind="websocket",
    )
    assert scope["client"][0] == "203.0.113.7" and scope["scheme"] == "wss"


def test_it_trusts_nobody_by_default():
    assert read_settings({}).trusted_proxies == ()
    scope = {"type": "http", "client": ("127.0.0.1", 1), "headers": [(b"x-forwarded-for", b"203.0.113.7")]}
    ForwardedHeaders(()).apply(scope)
    assert scope["client"] == ("127.0.0.1", 1)


def test_it_names_the_variable_for_an_item_that_is_no_address():
    assert read_settings({"INFERA_TRUSTED_PROXIES": "10.0.0.0/8, ::1"}).trusted_proxies == ("10.0.0.0/8", "::1/128")
    with pytest.raises(EnvError, match="INFERA_TRUSTED_PROXIES: 'lb.internal' is neither an IP address"):
        read_settings({"INFERA_TRUSTED_PROXIES": "lb.internal"})


# ---- against a real server behind a "balancer" on loopback


@pytest.fixture(scope="module")
def balanced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # cookies over plain http: the test signs in without TLS
    env = {"INFERA_TRUSTED_PROXIES": "127.0.0.1", "INFERA_LOGIN_MAX_FAILURES": "2", "INFERA_SECURE_COOKIES": "false"}
    with serve_process(tmp_path_factory.mktemp("forwarded") / "var", "--no-seed", env=env) as server:
        yield server


def sign_in_as(server: ServerProcess, password: str, forwarded_for: str) -> str:
    """The page a sign-in from `forwarded_for` (as the balancer says) ends on."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    headers = {"X-Forwarded-For": forwarded_for}
    url = server.base_url + "/accounts/login/"
    form = opener.open(urllib.request.Request(url, headers=headers), timeout=15).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    body = {"username": server.admin_username, "password": password, "csrfmiddlewaretoken": csrf}
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(body).encode(), headers=headers | {"Referer": url}
    )
    return opener.open(request, timeout=15).read().decode()


@pytest.mark.server
def test_it_locks_the_client_behind_the_balancer_not_the_balancer(balanced_server: ServerProcess):
    for _ in range(2):
        sign_in_as(balanced_server, "wrong", "203.0.113.7")
    assert "Too many failed sign-ins" in sign_in_as(balanced_server, balanced_server.admin_password, "203.0.113.7")
    # what the client put in front of the balancer's entry changes nothing
    locked = sign_in_as(balanced_server, balanced_server.admin_password, "198.51.100.99, 203.0.113.7")
    assert "Too many failed sign-ins" in locked
    # another client behind the same balancer signs in
    page = sign_in_as(balanced_server, balanced_server.admin_password, "203.0.113.8")
    assert "Too many failed sign-ins" not in page and 'name="password"' not in page
