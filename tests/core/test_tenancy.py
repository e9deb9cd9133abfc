"""Tenant keys (chaosproxy.core.tenancy): whose a request is, from its credentials and
``--tenant-header``, under a per-process random key.

What is proven: the same credentials give the same tenant whichever header carries them
(a ``Bearer`` scheme aside), different ones different tenants; a request with none is
the anonymous tenant; ``--tenant-header`` splits a tenant; and a tenant key says nothing
about the credential: it is no plain hash of it, and another process's key differs.
"""

from __future__ import annotations

import hashlib

import pytest

from chaosproxy.core.tenancy import ANONYMOUS, TenantKeys

SECRET = bytes(range(32))


def tenant(*headers: tuple[str, str], query: str = "", header: str | None = None) -> str:
    return TenantKeys(SECRET, header).of(list(headers), query)


def test_no_credentials_at_all_is_the_anonymous_tenant() -> None:
    assert tenant() == ANONYMOUS
    assert tenant(("Accept", "text/event-stream"), query="stream=true") == ANONYMOUS
    assert tenant(("Authorization", "Bearer "), ("x-api-key", "  ")) == ANONYMOUS
    assert tenant(query="key=") == ANONYMOUS


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
    assert tenant(query="monkey=sk-1") == ANONYMOUS


def test_different_credentials_are_different_tenants() -> None:
    seen = {
        tenant(("Authorization", "Bearer sk-1")),
        tenant(("Authorization", "Bearer sk-2")),
        tenant(("Authorization", "Basic dXNlcjpwYXNz")),
        tenant(("x-api-key", "sk-1"), ("api-key", "sk-2")),
        ANONYMOUS,
    }
    assert len(seen) == 5


def test_the_tenant_header_splits_a_tenant() -> None:
    shared = ("Authorization", "Bearer gateway-key")
    alice = tenant(shared, ("X-User", "alice"), header="x-user")
    bob = tenant(shared, ("x-user", "bob"), header="X-User")
    assert len({alice, bob, tenant(shared, header="X-User"), tenant(shared)}) == 3
    assert tenant(shared, header="X-User") == tenant(shared)  # not sent: credentials only
    # Without credentials it splits the anonymous tenant; unset, it is ignored.
    assert tenant(("X-User", "alice"), header="X-User") not in {ANONYMOUS, alice}
    assert tenant(("X-User", "alice")) == ANONYMOUS


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
