"""Forward (egress) proxies from the environment, chosen as curl chooses them.

- An ``https://`` upstream goes through ``https_proxy`` (or ``HTTPS_PROXY``): a
  ``CONNECT host:port`` tunnel, then TLS with the upstream inside it (SNI and the
  certificate check are the upstream's).
- An ``http://`` upstream goes through ``http_proxy``, lower case only: like curl,
  upper-case ``HTTP_PROXY`` is ignored, because a CGI program gets a client's ``Proxy:``
  request header as ``HTTP_PROXY`` ("httpoxy"). Requests then go to the proxy in
  absolute form (``GET http://host:port/path HTTP/1.1``).
- ``all_proxy`` (or ``ALL_PROXY``) is the fallback for both.
- ``no_proxy`` (or ``NO_PROXY``): a comma- (or space-) separated list; ``*`` alone
  bypasses every proxy; a name matches itself and its subdomains (a leading dot is
  optional, case does not matter); an IP address matches itself, a CIDR range
  (``10.0.0.0/8``, ``fd00::/8``) its addresses. Ports in entries are ignored, as curl
  ignores them.
- The proxy URL may carry credentials (``http://user:pass@proxy:3128``): they become a
  ``Proxy-Authorization: Basic`` header and are never printed. A URL without a scheme is
  ``http://``; without a port, 1080 (curl's default). Only ``http://`` proxies are
  supported.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from chaosproxy.core.redact import redact_url
from chaosproxy.upstream.errors import UpstreamConnectError

__all__ = ["ForwardProxy", "bypassed", "open_tunnel", "proxy_for"]

#: curl's default proxy port.
DEFAULT_PORT: Final = 1080
#: The most a proxy's answer to CONNECT may take, head and all.
MAX_CONNECT_HEAD: Final = 16384


@dataclass(frozen=True, slots=True)
class ForwardProxy:
    """One forward proxy: where it is and how to authenticate to it."""

    host: str
    port: int
    #: ``Basic ...`` from the URL's user info, or None; never printed.
    authorization: str | None = field(default=None, repr=False)
    #: The URL as it may be printed (password masked).
    shown: str = ""

    @property
    def where(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def basic_auth(username: str | None, password: str | None) -> str | None:
    """``Basic …`` for a URL's user info (percent-decoded; Latin-1 when it fits, as
    browsers send it, else UTF-8), or None without a user name."""
    if username is None:
        return None
    user_pass = f"{unquote(username)}:{unquote(password or '')}"
    try:
        raw = user_pass.encode("latin-1")
    except UnicodeEncodeError:
        raw = user_pass.encode("utf-8")
    return "Basic " + base64.b64encode(raw).decode("ascii")


def parse_proxy(url: str) -> ForwardProxy:
    """``url`` (``http://user:pass@host:port``, scheme optional) as a proxy.

    ValueError for an unsupported scheme or a URL without a host; its message never
    holds the credentials."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    shown = redact_url(text)
    if parts.scheme.lower() != "http":
        raise ValueError(f"forward proxy {shown}: only http:// proxies are supported")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"forward proxy {shown}: bad port") from None
    if not parts.hostname:
        raise ValueError(f"forward proxy {shown}: no host")
    return ForwardProxy(parts.hostname, port, basic_auth(parts.username, parts.password), shown)


def _env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value:
            return value
    return None


def proxy_for(scheme: str, host: str, env: Mapping[str, str] | None = None) -> ForwardProxy | None:
    """The forward proxy for an upstream (``scheme``, ``host``) per ``env`` (default
    ``os.environ``), or None to connect directly. ValueError for a bad proxy URL."""
    env = os.environ if env is None else env
    no_proxy = _env(env, "no_proxy", "NO_PROXY")
    if no_proxy is not None and bypassed(host, no_proxy):
        return None
    if scheme == "https":
        url = _env(env, "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
    else:
        # Never upper-case HTTP_PROXY: in a CGI environment it is a request header.
        url = _env(env, "http_proxy", "all_proxy", "ALL_PROXY")
    return None if url is None else parse_proxy(url)


def _as_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    return None


def _strip_port(entry: str) -> str:
    if entry.startswith("["):  # [v6] or [v6]:port
        return entry[1:].split("]", 1)[0]
    if entry.count(":") == 1:  # name:port or v4:port (a bare v6 has several)
        return entry.split(":", 1)[0]
    return entry


def bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``host`` is in ``no_proxy`` (curl's rules; see the module's doc)."""
    host = host.strip("[]").rstrip(".").lower()
    host_ip = _as_ip(host)
    for raw in no_proxy.replace(" ", ",").split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if host_ip is not None:
            net_text, _, bits = entry.partition("/")
            if not bits:
                net_text = _strip_port(net_text)
            ip = _as_ip(net_text)
            if ip is None or ip.version != host_ip.version:
                continue
            if not bits:
                if ip == host_ip:
                    return True
                continue
            with contextlib.suppress(ValueError):
                if host_ip in ipaddress.ip_network(f"{ip}/{bits}", strict=False):
                    return True
            continue
        name = _strip_port(entry).lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


async def open_tunnel(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, target: str, proxy: ForwardProxy
) -> None:
    """Ask the proxy on ``sock`` (connected) for a tunnel to ``target`` (``host:port``).

    Returns when the proxy said 2xx, with nothing read past its head: the socket is
    then the tunnel. Raises :class:`UpstreamConnectError` when the proxy refuses
    (``forward proxy refused the tunnel: 407 Proxy Authentication Required``), closes
    or answers something that is not HTTP."""
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    if proxy.authorization is not None:
        head += f"Proxy-Authorization: {proxy.authorization}\r\n"
    await loop.sock_sendall(sock, (head + "\r\n").encode("ascii", "surrogateescape"))
    buf = b""
    # Never more than the head's end can be: nothing past it may be taken from the
    # socket (the bytes after it are the tunnel's).
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_CONNECT_HEAD:
            raise UpstreamConnectError(
                f"forward proxy {proxy.where} sent a CONNECT answer over {MAX_CONNECT_HEAD} bytes"
            )
        want = 4 - _overlap(buf)
        data = await loop.sock_recv(sock, want)
        if not data:
            raise UpstreamConnectError(
                f"forward proxy {proxy.where} closed the connection instead of a tunnel"
            )
        buf += data
    status_line = buf.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (len(code) == 3 and code.isdigit()):
        raise UpstreamConnectError(
            f"forward proxy {proxy.where} answered CONNECT with something not HTTP"
        )
    if not code.startswith("2"):
        text = f"{code} {reason.strip()}".strip()[:120]
        raise UpstreamConnectError(f"forward proxy refused the tunnel: {text}")


def _overlap(buf: bytes) -> int:
    """How many bytes of ``\\r\\n\\r\\n`` ``buf`` already ends with (0 to 3)."""
    for n in (3, 2, 1):
        if buf.endswith(b"\r\n\r\n"[:n]):
            return n
    return 0
