"""TLS towards the upstreams, from the settings: the CA bundle, no verification, a client
certificate. Checked once at start-up, each problem a one-line :class:`StartupError`.

- ``upstream_ca``: verify against that PEM bundle instead of the system store.
- ``upstream_insecure``: no verification at all (no chain, no host name); a warning at
  start and in ``GET /health`` (:func:`upstream_warnings`).
- ``upstream_cert`` / ``upstream_key``: a client certificate, both or neither (the key
  may also be inside the certificate's file: then ``upstream_cert`` alone is enough).

SNI is the upstream's host name: the pool gives ``server_hostname`` (its URL's host) to
every connection; Python sends no SNI for an IP address, as RFC 6066 asks.
"""

from __future__ import annotations

import os
import ssl
from typing import TYPE_CHECKING

from chaosproxy.net import StartupError

if TYPE_CHECKING:
    from chaosproxy.config import Config

__all__ = ["check_upstream_tls", "tls_context", "upstream_warnings"]


def _readable(path: str, flag: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise StartupError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None


def _why(exc: ssl.SSLError | ValueError | OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc) or type(exc).__name__
    return " ".join(str(exc).split()) or type(exc).__name__


def check_upstream_tls(config: Config) -> None:
    """Refuse (:class:`StartupError`, one line) TLS settings that cannot work: a missing
    or unreadable file, a key without a certificate, a bundle or a certificate that
    does not load. Nothing is connected: the check is the same for every upstream."""
    tls_context(config)


def tls_context(config: Config) -> ssl.SSLContext:
    """The client TLS context for an https upstream, per the settings (raises
    :class:`StartupError` with a one-line reason)."""
    ca, cert, key = config.upstream_ca, config.upstream_cert, config.upstream_key
    if key is not None and cert is None:
        raise StartupError("--upstream-key needs --upstream-cert (the certificate of the key)")
    if ca is not None:
        _readable(ca, "--upstream-ca")
    if cert is not None:
        _readable(cert, "--upstream-cert")
    if key is not None:
        _readable(key, "--upstream-key")
    if config.upstream_insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if ca is not None:
            _load_ca(ctx, ca)  # still checked: a broken file is a mistake either way
    else:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if ca is not None:
            # Only this bundle: a fresh context has no CA until told (not the system's).
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            _load_ca(ctx, ca)
    if cert is not None:
        try:
            ctx.load_cert_chain(cert, key)
        except (ssl.SSLError, ValueError, OSError) as exc:
            what = f"--upstream-cert {cert}" + (f" with --upstream-key {key}" if key else "")
            hint = "" if key else " (no --upstream-key: the key must be in the same file)"
            raise StartupError(f"cannot load {what}: {_why(exc)}{hint}") from None
    return ctx


def _load_ca(ctx: ssl.SSLContext, ca: str) -> None:
    if os.path.isdir(ca):
        raise StartupError(f"--upstream-ca {ca} is a directory: give a PEM bundle file")
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, ValueError, OSError) as exc:
        raise StartupError(f"cannot load --upstream-ca {ca}: {_why(exc)}") from None
    if not ctx.get_ca_certs():
        raise StartupError(f"--upstream-ca {ca} holds no CA certificate")


def upstream_warnings(config: Config) -> list[str]:
    """What start-up says about the upstream TLS settings (stderr and ``/health``)."""
    if not config.upstream_insecure:
        return []
    return [
        "--upstream-insecure: the upstream's TLS certificate is NOT verified; anyone on "
        "the path can read and change the traffic (API keys included)"
    ]
