"""Tenants: whose a kept stream is (docs/reconnection.md, Tenants), without I/O.

Everything the proxy keeps across requests (resume history, the recent streams
``splice`` takes from) belongs to a *tenant*, and nothing crosses tenants unless a
scenario says so. A tenant is an opaque string made from a request's credentials:

* the values of the headers and query parameters that carry an API key, as each
  provider declares them (its ``key_headers`` and ``key_params``): ``Authorization`` (a
  ``Bearer`` scheme left out, so ``Authorization: Bearer K`` and ``x-api-key: K`` are
  one key), ``x-api-key`` (Anthropic), ``api-key`` (Azure OpenAI), ``x-goog-api-key``
  (Gemini) and the ``key`` query parameter (Gemini's, which the log masks too);
* plus, when the operator names one (``--tenant-header``), that header's value;
* plus, when the operator names one (``--tenant-cookie``), that cookie's value from the
  ``Cookie`` header (a browser's session), or every cookie with ``*``.

The key is an HMAC-SHA256 of those values under a random key given by the shell (one
per process), so it says nothing about a credential to whoever reads it, and cannot be
recomputed from a guessed short key.

A request with none of them at all is *anonymous*: nothing tells its user from another.
By default (``anonymous="apart"``) its tenant is :data:`STRANGER`: a tenant whose
streams are found by their unguessable token only (a reconnect's ``Last-Event-ID``),
never by anything another anonymous user could name too: ``splice`` takes no stream of
it and gives it none, and an upstream's own ids (``ids: upstream``) find none of its
streams (:func:`apart`). With ``anonymous="shared"`` (the proxies of ``chaosproxy
matrix`` and ``explore``, which serve one client) it is :data:`ANONYMOUS`, one tenant
shared by every such request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from typing import Literal
from urllib.parse import unquote_plus

import orjson

from chaosproxy.core.providers import key_headers, key_params

#: The tenant of every request without credentials (nor ``--tenant-header`` or
#: ``--tenant-cookie``) when anonymous requests are shared (``anonymous="shared"``); also
#: the default where no tenant is given (offline, unit tests).
ANONYMOUS = "anonymous"
#: The tenant of every such request when anonymous requests are kept apart (the
#: default): their streams are found by token only; each is its own for the rest.
STRANGER = "stranger"
#: ``--tenant-cookie *``: every cookie of the request, not one named cookie.
ALL_COOKIES = "*"
#: How anonymous requests are tenanted: kept apart (the default), or one shared tenant.
AnonymousRequests = Literal["apart", "shared"]

#: Request headers that carry a client's credentials (lower case): those of the
#: providers found in chaosproxy/core/providers/ (``key_headers()`` has those registered
#: since, a test's, too).
CREDENTIAL_HEADERS = key_headers()
#: Query parameters that carry one (compared decoded and case-insensitively).
CREDENTIAL_PARAMS = key_params()

#: Bytes of the HMAC kept in a tenant key (128 bits).
_DIGEST_BYTES = 16
_QUERY_SEP = re.compile(r"[&;]")


def apart(tenant: str) -> bool:
    """Whether ``tenant`` is :data:`STRANGER`: anonymous requests kept apart, which share
    nothing found by a name (a splice source, an upstream's id) with any other request,
    not even another of theirs: only a stream's own token finds it."""
    return tenant == STRANGER


def cookie_pairs(values: Iterable[str]) -> list[tuple[str, str]]:
    """The (name, value) pairs of ``Cookie`` header values (``a=1; b=2``), in order;
    names and values stripped, a pair without ``=`` or a name left out."""
    out: list[tuple[str, str]] = []
    for value in values:
        for pair in value.split(";"):
            name, eq, rest = pair.partition("=")
            name = name.strip()
            if eq and name:
                out.append((name, rest.strip()))
    return out


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
    once (``secrets.token_bytes``); ``header`` the operator's ``--tenant-header``;
    ``cookie`` its ``--tenant-cookie`` (a cookie's name, compared exactly as browsers
    do, or :data:`ALL_COOKIES`); ``anonymous`` how requests with none of them are
    tenanted (the module docstring)."""

    __slots__ = ("_anonymous", "_cookie", "_header", "_secret")

    def __init__(
        self,
        secret: bytes,
        header: str | None = None,
        cookie: str | None = None,
        anonymous: AnonymousRequests = "apart",
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the tenant secret must be at least 16 random bytes")
        if anonymous not in ("apart", "shared"):
            raise ValueError(f"anonymous requests are apart or shared, not {anonymous!r}")
        self._secret = secret
        self._header = header.lower() if header else None
        self._cookie = cookie or None
        self._anonymous = STRANGER if anonymous == "apart" else ANONYMOUS

    @property
    def header(self) -> str | None:
        return self._header

    @property
    def cookie(self) -> str | None:
        return self._cookie

    @property
    def anonymous(self) -> str:
        """The tenant of a request without credentials, tenant header or cookie."""
        return self._anonymous

    def of(self, headers: Iterable[tuple[str, str]], query: str = "") -> str:
        """The tenant of a request with these headers and this query string (without
        its ``?``)."""
        credentials: set[str] = set()
        extra: list[str] = []
        cookie_headers: list[str] = []
        tenant_header = self._header
        credential_headers = key_headers()
        for name, value in headers:
            lower = name.lower()
            if lower in credential_headers:
                bare = _bare(lower, value)
                if bare:
                    credentials.add(bare)
            if lower == tenant_header and value.strip():
                extra.append(value.strip())
            if lower == "cookie" and self._cookie is not None:
                cookie_headers.append(value)
        if query:
            credential_params = key_params()
            for part in _QUERY_SEP.split(query):
                key, eq, value = part.partition("=")
                if eq and unquote_plus(key).strip().lower() in credential_params:
                    bare = unquote_plus(value).strip()
                    if bare:
                        credentials.add(bare)
        session = self._session(cookie_headers) if cookie_headers else []
        if not credentials and not extra and not session:
            return self._anonymous
        material = orjson.dumps([sorted(credentials), extra, session])
        digest = hmac.new(self._secret, material, hashlib.sha256).hexdigest()
        return "t-" + digest[: 2 * _DIGEST_BYTES]

    def _session(self, headers: list[str]) -> list[str]:
        """What the request's cookies add to its key: the named cookie's values (a
        browser may send one name twice, for two paths: both count), or with
        :data:`ALL_COOKIES` every ``name=value``; sorted, so their order does not
        matter; empty values left out."""
        wanted = self._cookie
        pairs = cookie_pairs(headers)
        if wanted == ALL_COOKIES:
            return sorted(f"{name}={value}" for name, value in pairs if value)
        return sorted(value for name, value in pairs if name == wanted and value)


__all__ = [
    "ALL_COOKIES",
    "ANONYMOUS",
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_PARAMS",
    "STRANGER",
    "AnonymousRequests",
    "TenantKeys",
    "apart",
    "cookie_pairs",
]
