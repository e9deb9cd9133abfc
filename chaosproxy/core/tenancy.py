"""Tenants: whose a kept stream is (docs/reconnection.md, Tenants), without I/O.

Everything the proxy keeps across requests (resume history, the recent streams
``splice`` takes from) belongs to a *tenant*, and nothing crosses tenants unless a
scenario says so. A tenant is an opaque string made from a request's credentials:

* the values of ``Authorization`` (a ``Bearer`` scheme left out, so ``Authorization:
  Bearer K`` and ``x-api-key: K`` are one key), ``x-api-key`` (Anthropic), ``api-key``
  (Azure OpenAI), ``x-goog-api-key`` (Gemini) and the ``key`` query parameter (Gemini's,
  which the log already masks as a credential);
* plus, when the operator names one (``--tenant-header``), that header's value.

The key is an HMAC-SHA256 of those values under a random key given by the shell (one
per process), so it says nothing about a credential to whoever reads it, and cannot be
recomputed from a guessed short key. A request with none of them at all is the
:data:`ANONYMOUS` tenant, shared by every such request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus

import orjson

#: The tenant of every request without credentials (nor ``--tenant-header``); also the
#: default where no tenant is given (offline, unit tests).
ANONYMOUS = "anonymous"

#: Request headers that carry a client's credentials (lower case).
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
#: Query parameters that carry one (compared decoded and case-insensitively).
CREDENTIAL_PARAMS = frozenset({"key"})

#: Bytes of the HMAC kept in a tenant key (128 bits).
_DIGEST_BYTES = 16
_QUERY_SEP = re.compile(r"[&;]")


def _bare(name: str, value: str) -> str:
    """A credential's value, the same whichever header carried it."""
    value = value.strip()
    if name == "authorization":
        scheme, _, rest = value.partition(" ")
        if scheme.lower() == "bearer":
            return rest.strip()
    return value


class TenantKeys:
    """Makes the tenant key of a request. ``secret`` is random bytes the shell draws
    once (``secrets.token_bytes``); ``header`` the operator's ``--tenant-header``."""

    __slots__ = ("_header", "_secret")

    def __init__(self, secret: bytes, header: str | None = None) -> None:
        if len(secret) < 16:
            raise ValueError("the tenant secret must be at least 16 random bytes")
        self._secret = secret
        self._header = header.lower() if header else None

    @property
    def header(self) -> str | None:
        return self._header

    def of(self, headers: Iterable[tuple[str, str]], query: str = "") -> str:
        """The tenant of a request with these headers and this query string (without
        its ``?``)."""
        credentials: set[str] = set()
        extra: list[str] = []
        tenant_header = self._header
        for name, value in headers:
            lower = name.lower()
            if lower in CREDENTIAL_HEADERS:
                bare = _bare(lower, value)
                if bare:
                    credentials.add(bare)
            if lower == tenant_header and value.strip():
                extra.append(value.strip())
        if query:
            for part in _QUERY_SEP.split(query):
                key, eq, value = part.partition("=")
                if eq and unquote_plus(key).strip().lower() in CREDENTIAL_PARAMS:
                    bare = unquote_plus(value).strip()
                    if bare:
                        credentials.add(bare)
        if not credentials and not extra:
            return ANONYMOUS
        material = orjson.dumps([sorted(credentials), extra])
        digest = hmac.new(self._secret, material, hashlib.sha256).hexdigest()
        return "t-" + digest[: 2 * _DIGEST_BYTES]


__all__ = ["ANONYMOUS", "CREDENTIAL_HEADERS", "CREDENTIAL_PARAMS", "TenantKeys"]
