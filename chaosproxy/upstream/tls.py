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
import stat
from typing import Protocol

from chaosproxy.upstream.errors import StartupError

__all__ = [
    "TlsSettings",
    "check_tls_files",
    "check_upstream_tls",
    "has_tls_files",
    "tls_context",
    "upstream_warnings",
]


class TlsSettings(Protocol):
    """The plain values the TLS context is made of, named as the settings name them (the
    server's ``Config`` has them; so may anything else)."""

    @property
    def upstream_ca(self) -> str | None: ...
    @property
    def upstream_cert(self) -> str | None: ...
    @property
    def upstream_key(self) -> str | None: ...
    @property
    def upstream_insecure(self) -> bool: ...


#: The settings that name a file, as their flags say them.
_FILE_FLAGS = (
    ("upstream_ca", "--upstream-ca"),
    ("upstream_cert", "--upstream-cert"),
    ("upstream_key", "--upstream-key"),
)


class _PassPhrase(Exception):
    """OpenSSL asked for a key's pass phrase: the key is encrypted."""


def _no_pass_phrase() -> str:
    # Given as load_cert_chain's password: called only for an encrypted key, instead of
    # OpenSSL's own prompt on the terminal (which would wait for ever at start-up).
    raise _PassPhrase


def check_tls_files(config: TlsSettings) -> None:
    """Refuse (:class:`StartupError`, one line) a TLS file that is not a regular file (a
    FIFO, a directory, a device), by its metadata alone: nothing is opened, so nothing
    can block (a FIFO's open waits for a writer, a device may never end)."""
    for name, flag in _FILE_FLAGS:
        path: str | None = getattr(config, name)
        if path is None:
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise StartupError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise StartupError(_not_regular(flag, path, mode))


def _not_regular(flag: str, path: str, mode: int) -> str:
    return f"{flag} {path} is {_kind(mode)}, not a regular file: give a PEM file"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _readable(path: str, flag: str) -> None:
    # Opened without blocking, and checked again once open (the path may have changed
    # since check_tls_files looked at it).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise StartupError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StartupError(_not_regular(flag, path, mode))
        os.read(fd, 1)
    except OSError as exc:
        raise StartupError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


#: How a PEM file shows an encrypted private key: PKCS#8, or a traditional key's header
#: (neither can occur inside base64).
_ENCRYPTED_MARKS = (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", b"Proc-Type: 4,ENCRYPTED")
#: The most of a certificate or key file read to look for them.
MAX_PEM_BYTES = 1024 * 1024


def _encrypted(path: str) -> bool:
    """Whether a PEM file holds an encrypted private key."""
    try:
        with open(path, "rb") as f:
            head = f.read(MAX_PEM_BYTES)
    except OSError:
        return False  # said by the load that follows
    return any(mark in head for mark in _ENCRYPTED_MARKS)


def _why(exc: ssl.SSLError | ValueError | OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc) or type(exc).__name__
    return " ".join(str(exc).split()) or type(exc).__name__


def has_tls_files(config: TlsSettings) -> bool:
    """Whether the settings name a file (a CA bundle, a certificate, a key): something
    that can be wrong, and so is checked whatever the upstream's scheme."""
    return any(getattr(config, field) is not None for field, _ in _FILE_FLAGS)


def check_upstream_tls(config: TlsSettings) -> None:
    """Refuse (:class:`StartupError`, one line) TLS settings that cannot work: a missing
    or unreadable file, a key without a certificate, a bundle or a certificate that
    does not load. Nothing is connected: the check is the same for every upstream.
    Without a file there is nothing to check (the system store is not loaded for it:
    that costs some 20 ms of CPU, and an http upstream never uses it)."""
    if has_tls_files(config):
        tls_context(config)


def tls_context(config: TlsSettings) -> ssl.SSLContext:
    """The client TLS context for an https upstream, per the settings (raises
    :class:`StartupError` with a one-line reason)."""
    ca, cert, key = config.upstream_ca, config.upstream_cert, config.upstream_key
    if key is not None and cert is None:
        raise StartupError("--upstream-key needs --upstream-cert (the certificate of the key)")
    check_tls_files(config)
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
        holder = key if key is not None else cert
        flag = "--upstream-key" if key is not None else "--upstream-cert"
        encrypted = (
            f"{flag} {holder} is an encrypted (pass-phrase protected) private key; "
            "chaosproxy cannot ask for its pass phrase: give the key unencrypted "
            "(openssl pkey -in KEY -out PLAIN)"
        )
        if _encrypted(holder):
            raise StartupError(encrypted)
        try:
            ctx.load_cert_chain(cert, key, password=_no_pass_phrase)
        except _PassPhrase:
            raise StartupError(encrypted) from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            what = f"--upstream-cert {cert}" + (f" with --upstream-key {key}" if key else "")
            hint = "" if key else " (no --upstream-key: the key must be in the same file)"
            raise StartupError(f"cannot load {what}: {_why(exc)}{hint}") from None
    return ctx


def _load_ca(ctx: ssl.SSLContext, ca: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, ValueError, OSError) as exc:
        raise StartupError(f"cannot load --upstream-ca {ca}: {_why(exc)}") from None
    if not ctx.get_ca_certs():
        raise StartupError(f"--upstream-ca {ca} holds no CA certificate")


def upstream_warnings(config: TlsSettings) -> list[str]:
    """What start-up says about the upstream TLS settings (stderr and ``/health``)."""
    if not config.upstream_insecure:
        return []
    return [
        "--upstream-insecure: the upstream's TLS certificate is NOT verified; anyone on "
        "the path can read and change the traffic (API keys included)"
    ]
