"""Who may ask the admin API, from where and with what body (docs/admin-api.md, "Web
pages and the admin API").

A web page in the operator's browser can reach a loopback admin: by DNS rebinding (its
own name made to resolve to 127.0.0.1, so that the browser calls it same-origin: the
``Host`` header still says the page's name) or by a cross-origin request a browser sends
without asking first (a ``text/plain`` or form ``POST``: the ``Origin`` header says the
page's origin). So, besides the token:

- without a token, only a request to a loopback name or address (``Host``) is answered;
  an admin opened off loopback with ``--admin-insecure`` also answers an IP address (a
  name of its own is what a rebinding page would use) and the host it was bound to;
- a request whose ``Origin`` is not a loopback origin is refused, token or not;
- without a token, a POST, PUT or DELETE sends JSON (``application/json``: a browser
  asks the server before sending that cross-origin, and the admin never says yes);
  YAML (``application/yaml``, ``text/yaml``, ``application/x-yaml``), or no body at
  all, only from a caller that is not a web page (no ``Origin``) at an address the
  admin answers (loopback, unless ``--admin-insecure``). ``text/plain`` and form bodies,
  which any page may send anywhere, never.

Pure functions of the request's parts, so the rules can be tested without a socket.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

#: Admin request bodies beyond this are refused (413) before they are read.
MAX_BODY = 256 * 1024

JSON_TYPE = "application/json"
YAML_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml"})
#: Methods that change nothing and send no body: no body rule for them.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: How much of a refused Host or Origin a message quotes.
_SHOWN = 80


def host_of(value: str) -> str | None:
    """The host part of a ``Host`` value (``name``, ``name:port``, ``[v6]:port``),
    lower-cased and without brackets; None when it is not of that form."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return None
        host, rest = value[1:end], value[end + 1 :]
    else:
        host, sep, port = value.partition(":")
        rest = sep + port
    if rest and not (rest[0] == ":" and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    return host.lower() or None


def is_loopback_name(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ``::1``, 127.x mapped in v6)."""
    if host.lower() == "localhost":
        return True
    return _loopback_address(host)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _loopback_address(host: str) -> bool:
    ip = _ip(host)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def host_refusal(host_header: str, bound: str | None = None) -> str | None:
    """Why a tokenless admin bound to ``bound`` does not answer a request with this
    ``Host`` (None: it does). On loopback (or ``bound`` unknown): loopback names and
    addresses only. Off loopback (``--admin-insecure``): those, any IP address, and
    ``bound`` itself."""
    host = host_of(host_header)
    if host is not None and is_loopback_name(host):
        return None
    insecure = bound is not None and not is_loopback_name(bound)  # --admin-insecure
    if host is not None and insecure and (_ip(host) is not None or host == _bare(bound)):
        return None
    return (
        f"this admin API has no token, so it answers only requests to a loopback address "
        f"(Host: 127.0.0.1, localhost or [::1], any port); Host {_quote(host_header)} is "
        "refused (a web page reaching it through its own name: DNS rebinding). Call it "
        "by its loopback address, or give the admin a token (--admin-token)"
    )


def _bare(host: str | None) -> str:
    return (host or "").lower().strip("[]")


def is_loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` value is a page served from this machine's loopback
    (``http://localhost:3000``, ``https://127.0.0.1``); ``null`` is not."""
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - a bad port raises ValueError
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or host is None:
        return False
    if parts.path or parts.query or parts.fragment or parts.username is not None:
        return False
    return is_loopback_name(host)


def origin_refusal(origins: Sequence[str]) -> str | None:
    """Why a request carrying these ``Origin`` headers is refused (None: no header, or
    every origin in them is loopback)."""
    for header in origins:
        for origin in header.split() or [header]:
            if not is_loopback_origin(origin):
                return (
                    f"requests from web pages are refused (Origin {_quote(origin)}): a page "
                    "must not change what the proxy does to the traffic (CSRF). Call the "
                    "admin API from a program, which sends no Origin"
                )
    return None


def media_type(content_type: str | None) -> str | None:
    """``application/json`` for ``Application/JSON; charset=utf-8``; None when absent."""
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def body_refusal(
    method: str, content_type: str | None, *, has_body: bool, has_origin: bool
) -> str | None:
    """Why a tokenless admin refuses a request's body (None: it takes it), the request
    having passed :func:`host_refusal` and :func:`origin_refusal`: JSON from anyone;
    YAML, or no body at all, from a program (no ``Origin``: browsers send one with
    every request that is not a GET or a HEAD)."""
    if method.upper() in SAFE_METHODS:
        return None
    media = media_type(content_type)
    if media == JSON_TYPE:
        return None
    if not has_origin and (not has_body or media in YAML_TYPES):
        return None
    got = f"Content-Type {_quote(content_type)}" if content_type else "no Content-Type"
    if has_origin:
        wanted = "Content-Type: application/json"
    else:
        wanted = "Content-Type: application/json (or application/yaml for a scenario)"
    return (
        f"a {method.upper()} to this admin API without a token must send {wanted}; "
        f"{got} is refused (a web page can send it to any address without asking: CSRF)"
    )


def _quote(value: str) -> str:
    text = value if len(value) <= _SHOWN else value[:_SHOWN] + "…"
    return repr(text)


__all__ = [
    "JSON_TYPE",
    "MAX_BODY",
    "YAML_TYPES",
    "body_refusal",
    "host_of",
    "host_refusal",
    "is_loopback_name",
    "is_loopback_origin",
    "media_type",
    "origin_refusal",
]
