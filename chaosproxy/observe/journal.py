"""The request journal: what each client sent (docs/mock.md, The request journal).

Every ``request`` line carries what the request asks (:func:`line_fields`): its
``model``, its number of ``messages``, the names of the ``tools`` it offers, and its
``body_sha256`` and ``body_bytes``; with ``--log-content`` also its whole ``body``,
secrets masked. The admin API and the Python API keep more, bounded
(:class:`RequestEntry`): the parsed request (its messages as role and text, its tools,
its body) and its headers, credentials masked. :func:`matches` and :func:`verify` are
how ``proxy.requests(model=..., contains=...)`` and ``proxy.verify(...)`` find requests,
alike in-process and over the admin API.

Nothing kept here is shown unmasked: header values that carry credentials are ``***``,
so are the values of credential-like keys in a body (``api_key``, ``token``...) and
anything :func:`~chaosproxy.observe.logs.redact_text` masks in a text (a URL's password, a
``?key=`` in a URL, a bearer token).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import orjson

from chaosproxy.core.history import shown_event_id
from chaosproxy.core.llm_request import NOTHING, RequestView, read_request
from chaosproxy.core.records import InFlightSummary, JournalMessage, JournalRequest, RequestSummary
from chaosproxy.core.redact import MASK as MASK
from chaosproxy.core.redact import mask_headers, mask_json, redact_path, redact_text
from chaosproxy.core.tenancy import CREDENTIAL_HEADERS

#: Header names whose values are always masked (lower case), besides any name that is
#: a secret's (:func:`~chaosproxy.core.redact.is_secret_name`: auth, token, key, cert,
#: credential, assertion...).
SECRET_HEADERS = CREDENTIAL_HEADERS | {"cookie", "set-cookie", "proxy-authorization"}


def masked_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers as a mapping (names lower case, repeats joined by ``, ``), the
    values of those that carry credentials masked, by name and by shape
    (:func:`~chaosproxy.core.redact.mask_headers`), and a ``Last-Event-ID`` shown as the
    log shows it (a stream's token is a capability: its first characters only)."""
    out = mask_headers(headers, SECRET_HEADERS)
    last = out.get("last-event-id")
    if last is not None:
        out["last-event-id"] = shown_event_id(last)
    return out


def masked_body(value: Any) -> Any:
    """A parsed JSON body with the values of credential-like keys masked, and every
    text as :func:`~chaosproxy.observe.logs.redact_text` shows it
    (:func:`~chaosproxy.core.redact.mask_json`)."""
    return mask_json(value)


def _parse(body: bytes) -> Any:
    """The JSON value of a body, or None when it is not JSON."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


@dataclass(slots=True)
class RequestEntry:
    """One request as the journal keeps it: its method, path (credentials masked) and
    headers, and its body, read whole (kept only up to a bound); headers and body are
    shown masked (:meth:`as_dict`)."""

    method: str
    path: str
    #: As received (masked when shown, not before: most are never shown).
    headers: tuple[tuple[str, str], ...]
    #: The body as received (None: not kept, being larger than the bound).
    body: bytes | None
    #: Its length and sha256 (None when the proxy did not read it whole).
    size: int | None
    sha256: str | None
    #: What it asks (read once, for the request line).
    view: RequestView

    @classmethod
    def read(
        cls,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
        *,
        keep: int,
    ) -> RequestEntry:
        """The entry of a request whose body (None: not read whole) is this; the body is
        kept when it is at most ``keep`` bytes."""
        view = NOTHING if body is None else read_request(path, _parse(body))
        return cls(
            method=method,
            path=redact_path(path),
            headers=tuple(headers),
            body=body if body is not None and len(body) <= keep else None,
            size=None if body is None else len(body),
            sha256=None if body is None else hashlib.sha256(body).hexdigest(),
            view=view,
        )

    def line_fields(self, content: bytes | None = None) -> dict[str, Any]:
        """The fields it adds to the ``request`` line; with ``content`` (the body as
        received, given with ``--log-content``), also ``body``, masked."""
        if self.size is None:
            return {}
        fields: dict[str, Any] = {}
        view = self.view
        if view.model is not None:
            fields["model"] = view.model
        if view.messages:
            fields["messages"] = len(view.messages)
        if view.tools:
            fields["tools"] = list(view.tools)
        fields["body_bytes"] = self.size
        fields["body_sha256"] = self.sha256
        if content is not None:
            fields["body"] = body_text(content)
        return fields

    def as_dict(self) -> JournalRequest:
        """The parsed request, as the admin API and ``proxy.requests()`` show it:
        ``method``, ``path``, ``headers``, ``model``, ``stream``, ``messages`` (role and
        text each), ``tools`` (names), ``body`` (the JSON value, else the text), and
        ``body_sha256``/``body_bytes``; a body larger than the journal keeps has no
        ``messages`` nor ``body``, and ``body_omitted: true``."""
        out: JournalRequest = {
            "method": self.method,
            "path": self.path,
            "headers": masked_headers(self.headers),
        }
        if self.size is None or self.sha256 is None:
            return out
        out["model"] = self.view.model
        out["stream"] = self.view.stream
        out["tools"] = list(self.view.tools)
        if self.body is None:
            out["messages"] = len(self.view.messages)
            out["body_omitted"] = True
        else:
            parsed = _parse(self.body)
            body = masked_body(parsed) if parsed is not None else body_text(self.body)
            out["messages"] = _messages(read_request(self.path, body))
            out["body"] = body
        out["body_bytes"] = self.size
        out["body_sha256"] = self.sha256
        return out


def _messages(view: RequestView) -> list[JournalMessage]:
    return [{"role": m.role, "text": m.text} for m in view.messages]


def body_text(body: bytes) -> str:
    """A body as text, credentials masked (JSON re-encoded compactly)."""
    parsed = _parse(body)
    if parsed is None:
        return redact_text(body.decode("utf-8", "replace"))
    return orjson.dumps(masked_body(parsed)).decode()


# --------------------------------------------------------------------------- finding


@dataclass(frozen=True, slots=True)
class Criteria:
    """What a request must be (all given must hold); see :func:`matches`."""

    model: str | None = None
    path: str | None = None
    contains: str | None = None
    tool: str | None = None
    scenario: str | None = None

    def given(self) -> dict[str, str]:
        return {k: v for k in self.__slots__ if (v := getattr(self, k)) is not None}

    def describe(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.given().items()) or "any request"


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


#: A summary :func:`matches` reads: a finished request's, or one ``GET /requests`` shows.
_Summary = RequestSummary | InFlightSummary


def misses(summary: _Summary, criteria: Criteria) -> list[str]:
    """What of ``criteria`` a request's summary (with its ``request``) does not meet,
    one phrase each (empty: it matches)."""
    request: JournalRequest | None = summary.get("request")
    out: list[str] = []
    model = summary.get("model", request.get("model") if request is not None else None)
    if criteria.model is not None and not fnmatchcase(model or "", criteria.model):
        out.append(f"model is {model!r}")
    path = summary["path"].split("?", 1)[0]
    if criteria.path is not None and not fnmatchcase(path, criteria.path):
        out.append(f"path is {path!r}")
    tools = summary.get("tools", request.get("tools", []) if request is not None else [])
    if criteria.tool is not None and criteria.tool not in tools:
        out.append(f"tools are {tools!r}" if tools else "no tools offered")
    if criteria.contains is not None:
        texts = _strings([request.get("messages"), request.get("body")] if request else [])
        if not any(criteria.contains in text for text in texts):
            what = (
                "its body"
                if request is not None and "body" in request
                else "its request (not kept)"
            )
            out.append(f"{criteria.contains!r} is not in {what}")
    scenario = summary["scenario"]
    if criteria.scenario is not None and scenario != criteria.scenario:
        out.append(f"scenario is {scenario!r}")
    return out


def matches(summary: _Summary, criteria: Criteria) -> bool:
    """Whether the request meets every given criterion: ``model`` and ``path`` are
    ``fnmatch`` globs (an exact name is one), ``contains`` a substring of any text of the
    request (its messages, its system prompt, its tools' names and descriptions),
    ``tool`` the name of a tool it offers, ``scenario`` its scenario's name."""
    return not misses(summary, criteria)


class VerificationError(AssertionError):
    """``verify`` found a different number of matching requests than it expected; the
    message lists the requests seen and what each lacked."""


#: How many near misses ``verify`` lists.
SHOWN = 10


def verify(
    summaries: Sequence[RequestSummary], criteria: Criteria, count: int | None = None
) -> list[RequestSummary]:
    """The summaries that match (oldest first); VerificationError unless there are
    ``count`` of them (None: at least one)."""
    found = [s.copy() for s in summaries if matches(s, criteria)]
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    wanted = "at least 1" if count is None else f"exactly {count}"
    plural = "" if count in (None, 1) else "s"
    lines = [
        f"expected {wanted} request{plural} with {criteria.describe()}; "
        f"found {len(found)} among {len(summaries)} finished request"
        f"{'' if len(summaries) == 1 else 's'}"
    ]
    near = sorted(summaries, key=lambda s: len(misses(s, criteria)))[:SHOWN]
    for summary in near:
        what = misses(summary, criteria)
        request = summary.get("request")
        messages = request.get("messages") if request is not None else None
        last = (
            next(
                (m["text"] for m in messages[::-1] if m["role"] == "user"),
                None,
            )
            if isinstance(messages, list)
            else None
        )
        head = (
            f"  {summary['request_id']} {summary['method']} {summary['path']}"
            f" model={summary.get('model')!r} tools={summary.get('tools', [])!r}"
        )
        if last is not None:
            head += f" last user message={_short(last)!r}"
        lines.append(head + (": " + "; ".join(what) if what else ": matches"))
    if len(summaries) > SHOWN:
        lines.append(f"  … and {len(summaries) - SHOWN} more")
    raise VerificationError("\n".join(lines))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "Criteria",
    "RequestEntry",
    "VerificationError",
    "masked_body",
    "masked_headers",
    "matches",
    "misses",
    "verify",
]
