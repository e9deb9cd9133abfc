"""chaosproxy/server/state.py: what every request of one proxy shares."""

from __future__ import annotations

import secrets

import pytest

from chaosproxy.server.config import Config, ConfigError
from chaosproxy.server.state import tenant_keys

ALICE = [("Authorization", "Bearer alice")]


def test_a_tenant_secret_makes_a_tenant_the_same_on_every_replica() -> None:
    """Two replicas draw their own secrets; given one --tenant-secret, their keys agree
    (and still tell tenants apart), and a secret drawn per process never agrees."""
    given = Config(tenant_secret="correct horse battery staple")
    one = tenant_keys(given, secrets.token_bytes(32))
    two = tenant_keys(given, secrets.token_bytes(32))
    assert one.of(ALICE, "") == two.of(ALICE, "")
    assert one.of(ALICE, "") != one.of([("Authorization", "Bearer bob")], "")
    drawn = Config()
    assert tenant_keys(drawn, secrets.token_bytes(32)).of(ALICE, "") != tenant_keys(
        drawn, secrets.token_bytes(32)
    ).of(ALICE, "")


def test_a_short_tenant_secret_is_refused_and_never_shown() -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        Config(tenant_secret="short")
    assert "correct horse" not in repr(Config(tenant_secret="correct horse battery staple"))
