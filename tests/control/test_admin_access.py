"""Who may ask the admin API (chaosproxy.control.admin_access): the Host, Origin and body rules
as pure functions; tests/e2e/test_hostile_admin.py drives them through the live admin."""

from __future__ import annotations

import pytest

from chaosproxy.control.admin_access import (
    body_refusal,
    host_of,
    host_refusal,
    is_loopback_origin,
    media_type,
    origin_refusal,
)


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8478", "localhost"),
        ("127.0.0.1:8478", "127.0.0.1"),
        ("[::1]:8478", "::1"),
        ("[::1]", "::1"),
        ("attacker.example:8478", "attacker.example"),
        ("localhost:84x", None),
        ("localhost:", None),
        ("[::1", None),
        ("[::1]8478", None),
        ("", None),
        (":8478", None),
        ("localhost:\uff18\uff14", None),  # fullwidth digits are digits to str.isdigit
    ],
)
def test_the_host_part_of_a_host_header(value: str, host: str | None) -> None:
    assert host_of(value) == host


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8478",
        "LOCALHOST:1",
        "127.0.0.1",
        "127.0.0.1:8478",
        "127.1.2.3:9",
        "[::1]",
        "[::1]:8478",
        "[::ffff:127.0.0.1]:8478",
    ],
)
def test_a_tokenless_admin_answers_loopback_hosts(host: str) -> None:
    assert host_refusal(host) is None
    assert host_refusal(host, "127.0.0.1") is None
    assert host_refusal(host, "0.0.0.0") is None  # --admin-insecure: loopback still fine


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        "attacker.example:8478",
        "localhost.attacker.example:8478",
        "127.0.0.1.nip.io:8478",
        "localhost.:8478",
        "10.0.0.5:8478",
        "[2001:db8::1]:8478",
        "0.0.0.0:8478",
        "",
        "localhost:8478:1",
    ],
)
def test_a_tokenless_admin_on_loopback_refuses_any_other_host(host: str) -> None:
    refusal = host_refusal(host, "127.0.0.1")
    assert refusal is not None and "DNS rebinding" in refusal and "\n" not in refusal
    assert host_refusal(host) == refusal


def test_off_loopback_it_also_answers_an_ip_address_and_its_own_name() -> None:
    """``--admin-insecure``: reachable by address (an address cannot be rebound), and by
    the name it was bound to; never by another name."""
    assert host_refusal("10.0.0.5:8478", "0.0.0.0") is None
    assert host_refusal("[2001:db8::1]:8478", "::") is None
    assert host_refusal("chaos.internal:8478", "chaos.internal") is None
    assert host_refusal("attacker.example:8478", "0.0.0.0") is not None
    assert host_refusal("attacker.example:8478", "chaos.internal") is not None


def test_a_refusal_quotes_a_long_host_briefly() -> None:
    refusal = host_refusal("a" * 10_000 + ".example")
    assert refusal is not None and len(refusal) < 500


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:3000",
        "https://127.0.0.1:8443",
        "http://127.9.9.9",
        "http://[::1]:5173",
        "HTTP://LOCALHOST:3000",
    ],
)
def test_loopback_origins(origin: str) -> None:
    assert is_loopback_origin(origin)
    assert origin_refusal([origin]) is None


@pytest.mark.parametrize(
    "origin",
    [
        "http://attacker.example",
        "https://attacker.example:8478",
        "http://localhost.attacker.example",
        "null",
        "",
        "file://",
        "chrome-extension://abcdef",
        "http://localhost:99999",
        "http://user@localhost",
        "http://localhost/path",
        "ws://localhost",
    ],
)
def test_foreign_origins(origin: str) -> None:
    assert not is_loopback_origin(origin)
    refusal = origin_refusal([origin])
    assert refusal is not None and "CSRF" in refusal and "\n" not in refusal


def test_every_origin_a_request_carries_must_be_loopback() -> None:
    assert origin_refusal([]) is None
    assert origin_refusal(["http://localhost:3000", "http://127.0.0.1"]) is None
    assert origin_refusal(["http://localhost:3000", "http://attacker.example"]) is not None
    assert origin_refusal(["http://localhost:3000 http://attacker.example"]) is not None


def test_media_type() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert media_type("text/plain") == "text/plain"
    assert media_type(None) is None
    assert media_type(" ; x=y") is None


#: (method, Content-Type, has a body, has an Origin): taken?
BODIES = [
    # JSON: from anyone (a browser must ask first, and the admin never says yes).
    ("POST", "application/json", True, False, True),
    ("POST", "application/json; charset=utf-8", True, True, True),
    ("PUT", "application/json", True, False, True),
    ("DELETE", "application/json", False, True, True),
    # YAML and no body at all: from a program only (no Origin).
    ("POST", "application/yaml", True, False, True),
    ("POST", "text/yaml", True, False, True),
    ("POST", "application/x-yaml", True, False, True),
    ("POST", "application/yaml", True, True, False),
    ("POST", None, False, False, True),  # curl -X POST .../reset
    ("DELETE", None, False, False, True),
    ("POST", "application/x-www-form-urlencoded", False, False, True),  # urllib, no data
    ("POST", None, False, True, False),
    # What any page can send anywhere without asking: never.
    ("POST", "text/plain", True, False, False),
    ("POST", "text/plain;charset=UTF-8", True, True, False),
    ("POST", "application/x-www-form-urlencoded", True, False, False),
    ("POST", "multipart/form-data; boundary=x", True, True, False),
    ("PUT", "text/plain", True, False, False),
    ("POST", None, True, False, False),
    ("POST", "application/octet-stream", True, False, False),
    # Reading is not changing: no rule.
    ("GET", "text/plain", True, True, True),
    ("HEAD", None, False, True, True),
]


@pytest.mark.parametrize(("method", "content_type", "body", "origin", "taken"), BODIES)
def test_what_a_tokenless_admin_takes_as_a_body(
    method: str, content_type: str | None, body: bool, origin: bool, taken: bool
) -> None:
    refusal = body_refusal(method, content_type, has_body=body, has_origin=origin)
    assert (refusal is None) == taken, refusal
    if refusal is not None:
        assert "application/json" in refusal and "\n" not in refusal
