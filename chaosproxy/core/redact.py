"""Masking credentials in what is printed or logged: a path's credential-like query
parameters (:func:`redact_path`), any URL password, query credential or bearer token in
a text (:func:`redact_text`), a URL as it may be shown (:func:`redact_url`).

Pure string work, used by the frame log (chaosproxy/observe/logs.py, which re-exports
these names), by the command line and by the upstream client, which says which forward
proxy it could not reach without its password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

#: Query parameters whose values never reach a log (compared case-insensitively).
SECRET_PARAMS = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "api-key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "authorization",
        "password",
        "secret",
        "client_secret",
        "signature",
        "sig",
        "code",
        "x-api-key",
        "x-goog-api-key",
        "api_token",
        "auth_token",
        "session",
        "sessionid",
        "jwt",
        "pass",
        "passwd",
        "pwd",
        "private_key",
        "credential",
        "credentials",
        "client_assertion",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)

#: A query's separators: ``&``, and ``;`` (still used, and split on by some servers).
_QUERY_SEP = re.compile(r"([&;])")


def redact_path(path_qs: str) -> str:
    """``path_qs`` with the values of credential-like query parameters replaced by ***,
    whether ``&`` or ``;`` separates the parameters. Everything else is kept as it was
    (no re-encoding); a name is compared decoded and case-insensitively."""
    path, sep, query = path_qs.partition("?")
    if not sep:
        return path
    parts = _QUERY_SEP.split(query)
    masked = False
    for i in range(0, len(parts), 2):  # odd indices are the separators
        name, eq, _ = parts[i].partition("=")
        if eq and unquote_plus(name).strip().lower() in SECRET_PARAMS:
            parts[i] = name + "=***"
            masked = True
    return path + "?" + "".join(parts) if masked else path_qs


_SECRET_IN_TEXT = re.compile(
    # a URL's password: scheme://user:PASSWORD@ (up to the token's last @)
    r"(?P<userinfo>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'\"<>]*:)[^\s'\"<>]*@"
    # a credential-like query parameter: ?key=VALUE, &token=VALUE, ;key=VALUE
    r"|(?P<lead>[?&;](?:" + "|".join(re.escape(p) for p in sorted(SECRET_PARAMS)) + r")=)"
    r"[^&;#\s'\"<>]*"
    # an Authorization header's credentials quoted in a text
    r"|(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` (an error message, say) with credentials in it masked: the password of
    any URL (``https://user:***@host``), the values of credential-like query parameters
    (``?key=…`` or ``;key=…`` → ``key=***``) and bearer or basic tokens (``Bearer sk-…``
    → ``Bearer ***``)."""
    return _SECRET_IN_TEXT.sub(_mask_match, text)


def redact_url(url: str) -> str:
    """``url`` as it may be printed: the password of its user info masked
    (``https://user:***@host``; a password with a raw ``/`` or ``@`` in it too) and
    credential-like query parameters masked. When in doubt it masks more: in
    ``https://host:8443/a@b`` the ``8443/a`` is taken for a password."""
    return redact_path(redact_text(url))


def _mask_match(match: re.Match[str]) -> str:
    userinfo = match.group("userinfo")
    if userinfo is not None:
        return userinfo + "***@"
    lead = match.group("lead")
    if lead is not None:
        return lead + "***"
    return match.group("scheme") + "***"


__all__ = ["SECRET_PARAMS", "redact_path", "redact_text", "redact_url"]
