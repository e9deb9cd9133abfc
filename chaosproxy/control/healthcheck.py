"""The container's health check: ``python -m chaosproxy.healthcheck`` (docs/deploy.md).

Exit 0 when the admin API answers ``GET /health`` with 200 or, with the admin off, when
the proxy's port accepts a connection (which then closes without a request: counted in
``chaosproxy_empty_connections_total``, never logged); exit 1 with one line otherwise,
within :data:`TIMEOUT`.

The addresses come from ``CHAOSPROXY_ADMIN`` and ``CHAOSPROXY_LISTEN`` with ``serve``'s
defaults: a Docker ``HEALTHCHECK`` runs apart from the server and cannot see its command
line. A wildcard is asked on the loopback of its family (:func:`target`: ``0.0.0.0`` on
``127.0.0.1``, ``::`` on ``::1``), a name on each address it resolves to. ``serve`` asks
its admin API the same way once it listens (with the admin off, it looks up whether the
address dialled is one of this host's: :func:`has_address`) and warns when the check
would fail (an IPv6 wildcard in a container without IPv6, say).

Standard library only, and nothing else of chaosproxy: it runs every few seconds.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

#: The whole check, connecting included, at most (seconds).
TIMEOUT = 2.0
#: ``serve``'s defaults (chaosproxy.server.config).
DEFAULT_ADMIN = "127.0.0.1:8478"
DEFAULT_LISTEN = "127.0.0.1:8080"
#: Where a wildcard address is asked.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


class Unhealthy(Exception):
    """The check failed; the message is the one-line reason."""


def parse(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` as ``--listen`` and ``--admin`` read it (``[v6]:port``; an empty
    host is 127.0.0.1), or None for ``off``. Raises :class:`Unhealthy` for anything else."""
    if value == "off":
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise Unhealthy(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def target(host: str, port: int) -> tuple[str, int]:
    """Where the check asks a server bound to ``host:port``."""
    return _WILDCARDS.get(host, host), port


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise Unhealthy(f"{_authority(host, port)}: {exc.strerror or exc}") from None


def probe_health(host: str, port: int, timeout: float = TIMEOUT) -> None:
    """``GET /health`` on the admin API bound to ``host:port``: 200, or :class:`Unhealthy`."""
    host, port = target(host, port)
    where = _authority(host, port)
    with _connect(host, port, timeout) as sock:
        request = f"GET /health HTTP/1.1\r\nHost: {where}\r\nConnection: close\r\n\r\n"
        try:
            sock.sendall(request.encode("ascii"))
            head = b""
            while b"\r\n" not in head and len(head) < 1024:
                chunk = sock.recv(1024)
                if not chunk:
                    break
                head += chunk
        except OSError as exc:
            raise Unhealthy(f"{where}: {exc.strerror or exc}") from None
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    if status.split(" ")[1:2] != ["200"]:
        raise Unhealthy(f"http://{where}/health answered {status[:80]!r}")


def probe_port(host: str, port: int, timeout: float = TIMEOUT) -> None:
    """Whether the proxy bound to ``host:port`` accepts a connection (:class:`Unhealthy`)."""
    _connect(*target(host, port), timeout).close()


def has_address(host: str) -> bool:
    """Whether ``host`` (an address, or a name) is, or resolves to, an address of this
    host: what can be dialled here. Asks the kernel with a bind to port 0; connects to
    nothing."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind(sockaddr)
        except OSError:
            continue
        return True
    return False


def check(environ: Mapping[str, str] | None = None, timeout: float = TIMEOUT) -> str:
    """The check as the container runs it, from ``environ`` (default: the process's);
    what it asked. Raises :class:`Unhealthy`."""
    env = os.environ if environ is None else environ
    admin = parse(env.get("CHAOSPROXY_ADMIN") or DEFAULT_ADMIN)
    if admin is not None:
        probe_health(*admin, timeout=timeout)
        return f"http://{_authority(*target(*admin))}/health"
    listen = parse(env.get("CHAOSPROXY_LISTEN") or DEFAULT_LISTEN)
    if listen is None:
        raise Unhealthy("CHAOSPROXY_LISTEN is off: the proxy has no address")
    probe_port(*listen, timeout=timeout)
    return f"tcp://{_authority(*target(*listen))}"


def main() -> int:
    try:
        asked = check()
    except Unhealthy as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: {asked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
