"""Tenant keys (chaosproxy.core.tenancy): whose a request is, from its credentials,
``--tenant-header`` and ``--tenant-cookie``, under a per-process random key.

What is proven: the same credentials give the same tenant whichever header carries them
(a ``Bearer`` scheme aside), different ones different tenants; a request with none is
anonymous: kept apart (the stranger tenant) by default, the one shared anonymous tenant
when asked; ``--tenant-header`` splits a tenant; ``--tenant-cookie`` makes a named
cookie's value (or every cookie, ``*``) part of the key, in whatever order the cookies
come; and a tenant key says nothing about the credential: it is no plain hash of it,
and another process's key differs.
"""

from __future__ import annotations

import hashlib

import pytest

from chaosproxy.core.tenancy import (
    ALL_COOKIES,
    ANONYMOUS,
    STRANGER,
    TenantKeys,
    apart,
    cookie_pairs,
)

SECRET = bytes(range(32))


def tenant(
    *headers: tuple[str, str],
    query: str = "",
    header: str | None = None,
    cookie: str | None = None,
) -> str:
    return TenantKeys(SECRET, header, cookie).of(list(headers), query)


def test_no_credentials_at_all_is_anonymous_kept_apart() -> None:
    assert tenant() == STRANGER and apart(STRANGER)
    assert tenant(("Accept", "text/event-stream"), query="stream=true") == STRANGER
    assert tenant(("Authorization", "Bearer "), ("x-api-key", "  ")) == STRANGER
    assert tenant(query="key=") == STRANGER
    # A cookie is no credential unless --tenant-cookie names it.
    assert tenant(("Cookie", "session=abc")) == STRANGER
    assert tenant(("Cookie", "theme=dark"), cookie="session") == STRANGER
    assert tenant(("Cookie", "session="), cookie="session") == STRANGER


def test_shared_anonymous_requests_are_one_tenant() -> None:
    """``anonymous="shared"`` (the matrix's proxies): the one anonymous tenant, a
    tenant like any other (not apart); credentials still make their own."""
    shared = TenantKeys(SECRET, anonymous="shared")
    assert shared.of([]) == ANONYMOUS == shared.anonymous and not apart(ANONYMOUS)
    assert shared.of([("x-api-key", "sk-1")]) == tenant(("x-api-key", "sk-1"))
    assert TenantKeys(SECRET).anonymous == STRANGER
    with pytest.raises(ValueError, match="apart or shared"):
        TenantKeys(SECRET, anonymous="mixed")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "carried",
    [
        (("Authorization", "Bearer sk-1"),),
        (("authorization", "bearer  sk-1 "),),
        (("x-api-key", "sk-1"),),  # Anthropic
        (("api-key", "sk-1"),),  # Azure OpenAI
        (("X-Goog-Api-Key", "sk-1"),),  # Gemini
        (("Authorization", "Bearer sk-1"), ("x-api-key", "sk-1")),
    ],
)
def test_one_key_is_one_tenant_whichever_header_carries_it(
    carried: tuple[tuple[str, str], ...],
) -> None:
    assert tenant(*carried) == tenant(("x-api-key", "sk-1")) != ANONYMOUS


def test_the_gemini_key_parameter_is_a_credential() -> None:
    assert tenant(query="alt=sse&key=sk-1") == tenant(("x-goog-api-key", "sk-1"))
    assert tenant(query="alt=sse;KEY=sk%2D1") == tenant(("x-goog-api-key", "sk-1"))
    assert tenant(query="monkey=sk-1") == STRANGER


def test_different_credentials_are_different_tenants() -> None:
    seen = {
        tenant(("Authorization", "Bearer sk-1")),
        tenant(("Authorization", "Bearer sk-2")),
        tenant(("Authorization", "Basic dXNlcjpwYXNz")),
        tenant(("x-api-key", "sk-1"), ("api-key", "sk-2")),
        STRANGER,
    }
    assert len(seen) == 5


def test_the_tenant_header_splits_a_tenant() -> None:
    shared = ("Authorization", "Bearer gateway-key")
    alice = tenant(shared, ("X-User", "alice"), header="x-user")
    bob = tenant(shared, ("x-user", "bob"), header="X-User")
    assert len({alice, bob, tenant(shared, header="X-User"), tenant(shared)}) == 3
    assert tenant(shared, header="X-User") == tenant(shared)  # not sent: credentials only
    # Without credentials it splits the anonymous tenant; unset, it is ignored.
    assert tenant(("X-User", "alice"), header="X-User") not in {STRANGER, alice}
    assert tenant(("X-User", "alice")) == STRANGER


def test_cookies_are_read_as_browsers_send_them() -> None:
    assert cookie_pairs(["a=1; b = 2 ;c=", " d=x=y", "junk; =nameless; e=5"]) == [
        ("a", "1"),
        ("b", "2"),
        ("c", ""),
        ("d", "x=y"),
        ("e", "5"),
    ]


def test_the_tenant_cookie_makes_each_session_a_tenant() -> None:
    alice = tenant(("Cookie", "theme=dark; sid=alice-session"), cookie="sid")
    bob = tenant(("Cookie", "sid=bob-session; theme=dark"), cookie="sid")
    assert len({alice, bob, STRANGER}) == 3
    # Only the named cookie counts (exactly: names are case-sensitive), wherever it is.
    assert alice == tenant(("Cookie", "lang=fr"), ("Cookie", "sid=alice-session"), cookie="sid")
    assert tenant(("Cookie", "SID=alice-session"), cookie="sid") == STRANGER
    # Not the same as a header or a key of that value: each source is its own part.
    assert alice != tenant(("X-Sid", "alice-session"), header="X-Sid")
    assert alice != tenant(("x-api-key", "alice-session"))
    # With credentials too: each (key, session) pair is a tenant.
    key = ("Authorization", "Bearer gateway-key")
    assert len({tenant(key), tenant(key, ("Cookie", "sid=a"), cookie="sid"), alice}) == 3
    # Two values of the name (two paths): both count, in any order.
    both = tenant(("Cookie", "sid=a; sid=b"), cookie="sid")
    assert both == tenant(("Cookie", "sid=b; sid=a"), cookie="sid")
    assert both not in {tenant(("Cookie", "sid=a"), cookie="sid"), STRANGER}


def test_every_cookie_with_a_star() -> None:
    jar = tenant(("Cookie", "a=1; b=2"), cookie=ALL_COOKIES)
    assert jar == tenant(("Cookie", "b=2"), ("Cookie", "a=1"), cookie=ALL_COOKIES)
    assert jar != tenant(("Cookie", "a=1; b=3"), cookie=ALL_COOKIES)
    assert jar != tenant(("Cookie", "a=1"), cookie=ALL_COOKIES) != STRANGER
    assert tenant(("Cookie", "a=; b="), cookie=ALL_COOKIES) == STRANGER


def test_a_tenant_key_says_nothing_about_the_credential() -> None:
    key = "sk-short"
    made = tenant(("x-api-key", key))
    assert made.startswith("t-") and len(made) == 2 + 32
    assert key not in made
    plain = hashlib.sha256(key.encode()).hexdigest()
    assert made[2:] not in plain  # salted: no dictionary of short keys finds it
    # Another process draws another key: the same credential, another tenant string.
    other = TenantKeys(bytes(32)).of([("x-api-key", key)])
    assert other != made
    with pytest.raises(ValueError, match="16 random bytes"):
        TenantKeys(b"short")
