"""The response head decision: which headers go upstream and back, and how the body
is framed.

What the proxy forwards of the request's headers (:func:`forwarded_request_headers`),
the client's headers from the upstream's (:func:`client_headers`: hop-by-hop headers
never cross; a framed body loses its length), the ``X-Chaos-*`` headers every response
carries (:func:`chaos_headers`), the faults that edit the head (:func:`edit_headers`),
the body's framing (:func:`body_format`), and an answer the proxy gives itself
(:func:`error_answer`). The session (:mod:`chaosproxy.core.session`) decides the head
once, with these, when the upstream's head arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from chaosproxy.core.actions import Respond
from chaosproxy.core.faults import Fault
from chaosproxy.core.frames import Format, format_for_content_type

#: Hop-by-hop headers (RFC 9110 §7.6.1): never forwarded in either direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Request headers the proxy sets itself (or that describe the client's hop only).
REQUEST_DROP = HOP_BY_HOP | {"host", "accept-encoding", "content-length"}
#: Response headers recomputed for the client (a framed body changes its length).
RESPONSE_DROP = HOP_BY_HOP | {"content-length"}

Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Head:
    """The response head to send: decided once, by :meth:`Session.response_head`."""

    status: int
    reason: str | None
    headers: list[tuple[str, str]]
    #: Whether the body goes through the fault pipeline (else each read as it is).
    framed: bool


#: Headers of the built-in mock's knobs, dropped from untrusted clients' requests (the
#: scenario room names it too, where an untrusting choice counts what it ignored).
UNTRUSTED_PREFIX = "x-mock-"


def forwarded_request_headers(
    headers: Iterable[tuple[str, str]], *, trusted: bool = True
) -> list[tuple[str, str]]:
    """The request headers sent upstream: without hop-by-hop headers (and those the
    client's ``Connection`` names), ``X-Chaos-*``, ``Host`` and ``Content-Length``;
    ``Accept-Encoding: identity``, so the body can be framed. A client not ``trusted``
    (``--trust-client-scenarios no``) steers nothing: the built-in mock's knobs
    (``X-Mock-*``) are not forwarded either."""
    items = list(headers)
    named = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    out = [
        (name, value)
        for name, value in items
        if (lower := name.lower()) not in REQUEST_DROP
        and lower not in named
        and not lower.startswith("x-chaos-")
        and (trusted or not lower.startswith(UNTRUSTED_PREFIX))
    ]
    out.append(("Accept-Encoding", "identity"))
    return out


def error_answer(status: int, message: str, headers: Iterable[tuple[str, str]] = ()) -> Respond:
    """An answer the proxy gives itself: a JSON error body, the reason also in
    ``X-Chaos-Proxy-Error``, plus ``headers``."""
    body = orjson.dumps({"error": {"type": "chaosproxy_error", "message": message}})
    out = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Chaos-Proxy-Error": message.encode("ascii", "replace").decode()[:200],
    }
    out.update(headers)
    return Respond(status, out, body)


def client_headers(headers: Headers, framed: bool) -> list[tuple[str, str]]:
    """The upstream's response headers as the client gets them: without hop-by-hop
    headers and ``Content-Length`` (a framed body changes its length), except that a
    body that is not framed keeps the upstream's length."""
    out = [(k, v) for k, v in headers if k.lower() not in RESPONSE_DROP]
    if not framed:
        length = [(k, v) for k, v in headers if k.lower() == "content-length"]
        out += length[:1]
    return out


def chaos_headers(request_id: str, label: str, seed: int) -> list[tuple[str, str]]:
    """``X-Chaos-*`` headers on every response, so a test finds its request."""
    return [
        ("X-Chaos-Request-Id", request_id),
        ("X-Chaos-Scenario", label),
        ("X-Chaos-Seed", str(seed)),
    ]


def edit_headers(
    faults: Sequence[Fault], status: int, headers: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], str | None]:
    """``headers`` as the faults that edit a head (``headers``) leave them, and the
    first such fault's name (None: no fault edits the head, ``headers`` unchanged)."""
    editors = [f for f in faults if f.edits_headers]
    if not editors:
        return headers, None
    plain = dict(headers)  # (a dict loses repeated headers: only when a fault edits)
    for fault in editors:
        plain = fault.response_headers(status, plain)
    return list(plain.items()), editors[0].name


def body_format(headers: Headers, scenario_format: str) -> Format:
    """How the body is framed: the scenario's ``format`` unless ``auto``; else from the
    ``Content-Type`` (``raw`` for an encoded body: its events cannot be read)."""
    if scenario_format != "auto":
        return scenario_format  # type: ignore[return-value]
    lookup = {k.lower(): v for k, v in headers}
    if lookup.get("content-encoding", "identity").lower() != "identity":
        return "raw"
    return format_for_content_type(lookup.get("content-type"))


__all__ = [
    "HOP_BY_HOP",
    "REQUEST_DROP",
    "RESPONSE_DROP",
    "Head",
    "Headers",
    "body_format",
    "chaos_headers",
    "client_headers",
    "edit_headers",
    "error_answer",
    "forwarded_request_headers",
]
