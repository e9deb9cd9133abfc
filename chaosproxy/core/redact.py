"""Masking credentials in what is printed, logged or shown, by name and by shape.

By name (:func:`is_secret_name`): a header or query parameter that a provider declares
as carrying its API key (``key_headers``, ``key_params``: chaosproxy/core/providers/),
and a header, a query parameter or a JSON key whose name says secret, key, token,
credential, password, cert or assertion (and auth, cookie, session, signature, jwt...),
word by word: ``X-Amz-Credential``, ``X-JWT-Assertion``,
``X-Client-Cert``, ``openai_api_key``, ``aws_secret_access_key``, ``apiKey``, ``token``,
``auth_header``. A word is a whole word of the name (``_``, ``-``, ``.``, a change of
case), so ``tokens``, ``max_tokens``, ``tokenizer`` or ``keyword`` are not secret names;
and a JSON value that is a number, a boolean or null is never masked, whatever its key
(``token_count: 12``, ``promptTokenCount``: counts, never credentials).

By shape (:func:`redact_text`): wherever a text may hold one, API keys are masked by
what they look like: ``sk-…`` (OpenAI's, ``sk-proj-…``, Anthropic's ``sk-ant-…``),
AWS access key ids (``AKIA…``, ``ASIA…``), Google API keys (``AIza…``), GitHub and
Slack tokens, JSON Web Tokens (``eyJ….eyJ….…``), ``Bearer``/``Basic`` credentials, a
URL's password and credential-like query parameters.

The functions: :func:`redact_path` (a path's query), :func:`redact_text`,
:func:`redact_url`, :func:`mask_headers` (a request's headers, as the journal shows them)
and :func:`mask_json` (a parsed JSON body). Pure string work, used by the frame log
(chaosproxy/observe/logs.py, which re-exports some of these names), the journal, the
admin API, the command line and the upstream client, which says which forward proxy it
could not reach without its password.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_plus

from chaosproxy.core.providers import key_headers, key_params

#: What a masked value is shown as.
MASK = "***"

#: The words that make a name secret (compared lower case, whole words of the name).
SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "key",
        "apikey",
        "token",
        "credential",
        "credentials",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "cert",
        "certificate",
        "assertion",
        "auth",
        "authorization",
        "cookie",
        "session",
        "sessionid",
        "signature",
        "jwt",
        "bearer",
        "privatekey",
    }
)

#: Query parameters whose values never reach a log (compared case-insensitively),
#: besides those a provider declares (its ``key_headers`` and ``key_params``).
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
#: Where a name's words meet: a lower case letter or a digit before a capital
#: (``apiKey``), a run of capitals before a capitalised word (``JWTAssertion``).
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def is_secret_name(name: str) -> bool:
    """Whether a header, query parameter or JSON key of this name carries a credential:
    a provider's key header or parameter, one of :data:`SECRET_PARAMS`, or a name with a
    word of :data:`SECRET_WORDS`."""
    lower = name.strip().lower()
    return lower in key_headers() or lower in key_params() or _secret_by_name(name)


@functools.lru_cache(maxsize=4096)
def _secret_by_name(name: str) -> bool:
    lower = name.strip().lower()
    if lower in SECRET_PARAMS:
        return True
    words = _NOT_ALNUM.split(_CAMEL.sub("_", name.strip()).lower())
    return any(word in SECRET_WORDS for word in words)


#: API keys and tokens found by their shape in any text (each keeps a short prefix that
#: says what it was, never enough of it to use).
_SHAPES = re.compile(
    r"(?P<sk>\bsk-)[A-Za-z0-9_-]{12,}"  # OpenAI (sk-…, sk-proj-…), Anthropic (sk-ant-…)
    r"|(?P<aws>\b(?:AKIA|ASIA|AGPA|AIDA|AROA))[A-Z0-9]{16}\b"  # AWS key ids
    r"|(?P<google>\bAIza)[0-9A-Za-z_-]{30,}"  # Google API keys
    r"|(?P<github>\b(?:gh[pousr]_|github_pat_))[A-Za-z0-9_]{20,}"
    r"|(?P<slack>\bxox[abprs]-)[A-Za-z0-9-]{10,}"
    r"|(?P<jwt>\beyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JSON Web Tokens
)


def redact_path(path_qs: str) -> str:
    """``path_qs`` with the values of credential-like query parameters replaced by ***
    (:func:`is_secret_name`), whether ``&`` or ``;`` separates the parameters, and any
    key shape in it masked (:func:`redact_text`'s). Everything else is kept as it was
    (no re-encoding); a name is compared decoded and case-insensitively."""
    path, sep, query = path_qs.partition("?")
    if not sep:
        return _mask_shapes(path)
    parts = _QUERY_SEP.split(query)
    for i in range(0, len(parts), 2):  # odd indices are the separators
        name, eq, _ = parts[i].partition("=")
        if eq and is_secret_name(unquote_plus(name)):
            parts[i] = name + "=" + MASK
    return _mask_shapes(path + "?" + "".join(parts))


_SECRET_IN_TEXT = re.compile(
    # a URL's password: scheme://user:PASSWORD@ (up to the token's last @)
    r"(?P<userinfo>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'\"<>]*:)[^\s'\"<>]*@"
    # a query parameter: ?key=VALUE, &token=VALUE, ;key=VALUE (masked when its name is
    # a secret's: is_secret_name)
    r"|(?P<lead>[?&;](?P<param>[A-Za-z0-9_.%+-]+)=)(?P<value>[^&;#\s'\"<>]*)"
    # an Authorization header's credentials quoted in a text
    r"|(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` (an error message, a message's text, a header's value) with credentials
    in it masked: the password of any URL (``https://user:***@host``), the values of
    credential-like query parameters (``?key=…`` or ``;key=…`` → ``key=***``), bearer or
    basic credentials (``Bearer sk-…`` → ``Bearer ***``), and API keys by their shape
    (``sk-proj-…`` → ``sk-***``, ``AKIA…`` → ``AKIA***``, a JWT → ``eyJ***``)."""
    return _mask_shapes(_SECRET_IN_TEXT.sub(_mask_match, text))


def redact_url(url: str) -> str:
    """``url`` as it may be printed: the password of its user info masked
    (``https://user:***@host``; a password with a raw ``/`` or ``@`` in it too) and
    credential-like query parameters masked. When in doubt it masks more: in
    ``https://host:8443/a@b`` the ``8443/a`` is taken for a password."""
    return redact_path(redact_text(url))


def _mask_shapes(text: str) -> str:
    if "-" not in text and "_" not in text and "." not in text and "A" not in text:
        return text  # (no shape can match: the common case, cheaply)
    return _SHAPES.sub(_mask_shape, text)


def _mask_shape(match: re.Match[str]) -> str:
    return next(v for v in match.groupdict().values() if v is not None) + MASK


def _mask_match(match: re.Match[str]) -> str:
    userinfo = match.group("userinfo")
    if userinfo is not None:
        return userinfo + MASK + "@"
    lead = match.group("lead")
    if lead is not None:
        if is_secret_name(unquote_plus(match.group("param"))):
            return lead + MASK
        return match.group(0)
    return match.group("scheme") + MASK


def mask_headers(
    headers: Iterable[tuple[str, str]], always: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Headers as a mapping (names lower case, repeats joined by ``, ``): the value of a
    header whose name is a secret's (:func:`is_secret_name`, or one of ``always``,
    lower case) is ``***``, every other value as :func:`redact_text` shows it."""
    out: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        value = MASK if lower in always or is_secret_name(lower) else redact_text(value)
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
    return out


#: JSON nested deeper than this is shown as ``***`` (a body nested a thousand levels
#: deep must not take the masking past Python's recursion limit).
MAX_MASK_DEPTH = 100


def mask_json(value: Any, depth: int = 0) -> Any:
    """A parsed JSON value with the value of every key whose name is a secret's masked
    (a string, an object or a list alike: ``"token": {...}`` → ``"token": "***"``; a
    number, a boolean or null kept: counts and flags are no credentials), and every
    text as :func:`redact_text` shows it. Deeper than :data:`MAX_MASK_DEPTH`: ``***``."""
    if isinstance(value, str):
        return redact_text(value)
    if depth >= MAX_MASK_DEPTH and isinstance(value, dict | list):
        return MASK
    if isinstance(value, list):
        return [mask_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {
            (redact_text(k) if isinstance(k, str) else k): MASK
            if isinstance(k, str) and _maskable(v) and is_secret_name(k)
            else mask_json(v, depth + 1)
            for k, v in value.items()
        }
    return value


def _maskable(value: Any) -> bool:
    return not (value is None or isinstance(value, bool | int | float))


__all__ = [
    "MASK",
    "MAX_MASK_DEPTH",
    "SECRET_PARAMS",
    "SECRET_WORDS",
    "is_secret_name",
    "mask_headers",
    "mask_json",
    "redact_path",
    "redact_text",
    "redact_url",
]
