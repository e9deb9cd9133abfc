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
from typing import Any, Literal

import orjson

from chaosproxy.core.history import shown_event_id
from chaosproxy.core.llm_request import NOTHING, Message, RequestView, read_request
from chaosproxy.core.records import (
    HeadersTruncated,
    InFlightSummary,
    JournalMessage,
    JournalRequest,
    RequestSummary,
)
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


#: How deep a request body may nest and still be read (its model, messages and tools,
#: masked, searched by ``contains=``); a deeper one is kept as its size and hash only,
#: so that no reader of it recurses past Python's limit. Real requests nest a dozen
#: levels (a tool's JSON Schema); orjson itself refuses past 1,024.
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a parsed JSON value nests more than ``limit`` arrays and objects deep
    (looked at without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _readable(body: bytes) -> tuple[Any, bool]:
    """(the JSON value of a body or None, whether it nests too deep to be read)."""
    parsed = _parse(body)
    if parsed is not None and too_deep(parsed):
        return None, True
    return parsed, False


#: What one journal entry keeps at most of what a client sent, by default
#: (``--journal-entry-bytes``): its header fields, then its body.
DEFAULT_ENTRY_BYTES = 64 * 1024
#: Of that, at most this much of header fields (names and values)...
HEADERS_KEEP = 16 * 1024
#: ... each value cut to this many characters (and ``…``), so that one long field never
#: crowds out the others.
HEADER_VALUE_KEEP = 1024
#: What a value cut short ends with.
CUT = "…"
#: What each message's digest (role, chars, sha256) counts, besides its role.
_DIGEST_BYTES = 64 + 8
#: What an entry holds besides its kept text (its own object, the tuples and strings'
#: headers, the view): measured with tracemalloc (tests/observe/test_journal.py).
ENTRY_OVERHEAD = 1024
#: What each kept header field holds besides its characters (a tuple, two strings).
FIELD_OVERHEAD = 160
#: What each message's digest holds besides what :data:`_DIGEST_BYTES` counts (its
#: object and its strings' headers).
DIGEST_OVERHEAD = 160


#: The tools' names an entry (and the ``request`` line) keeps, the first ones; and the
#: longest name (or model) kept whole, longer ones cut (``…``): a body of a megabyte
#: could otherwise name a hundred thousand tools, or a model of a megabyte.
MAX_TOOLS = 256
MAX_NAME = 256


def _name(text: str) -> str:
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + CUT


@dataclass(frozen=True, slots=True)
class MessageDigest:
    """A message as the journal keeps it without its text: role, length, hash."""

    role: str
    chars: int
    sha256: str

    def as_dict(self) -> JournalMessage:
        return {"role": self.role, "chars": self.chars, "sha256": self.sha256}


def _digest(message: Message) -> MessageDigest:
    text = message.text
    return MessageDigest(
        message.role, len(text), hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    )


def _kept_headers(
    headers: Iterable[tuple[str, str]], budget: int
) -> tuple[tuple[tuple[str, str], ...], HeadersTruncated | None]:
    """The header fields an entry keeps within ``budget`` characters (names and
    values; each value cut to HEADER_VALUE_KEEP), and what was left out (None:
    nothing)."""
    kept: list[tuple[str, str]] = []
    fields = total = omitted = cut = used = 0
    for name, value in headers:
        fields += 1
        total += len(name) + len(value)
        shown = value if len(value) <= HEADER_VALUE_KEEP else value[:HEADER_VALUE_KEEP] + CUT
        size = len(name) + len(shown)
        if used + size > budget:
            omitted += 1
            continue
        used += size
        cut += shown is not value
        kept.append((name, shown))
    if not omitted and not cut:
        return tuple(kept), None
    return tuple(kept), {"fields": fields, "bytes": total, "omitted": omitted, "cut": cut}


@dataclass(slots=True)
class RequestEntry:
    """One request as the journal keeps it: its method, path (credentials masked) and
    header fields (bounded: :data:`HEADERS_KEEP`), and its body, read whole; the body
    itself (and so the prompts) only with ``--log-content`` and within the entry's
    bound, otherwise its model, tools, size and hash, and each message's role, length
    and hash. Headers and body are shown masked (:meth:`as_dict`)."""

    method: str
    path: str
    #: As received, within the bound (masked when shown, not before: most are never
    #: shown).
    headers: tuple[tuple[str, str], ...]
    #: The body as received (None: not kept: see ``omitted``).
    body: bytes | None
    #: Its length and sha256 (None when the proxy did not read it whole).
    size: int | None
    sha256: str | None
    #: What it asks (read once, for the request line), without the messages' text.
    view: RequestView
    #: Why the body is not kept (None: it is, or there is none).
    omitted: Literal["content", "size", "depth"] | None = None
    #: Without the body: each message's role, length and hash (None: how many only).
    digests: tuple[MessageDigest, ...] | None = None
    #: How many messages the body has.
    messages: int = 0
    #: What was left out of the header fields (None: nothing).
    headers_truncated: HeadersTruncated | None = None
    #: What it holds, in bytes: its kept text plus its objects (:data:`ENTRY_OVERHEAD`).
    held: int = 0

    @classmethod
    def read(
        cls,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
        *,
        keep: int = DEFAULT_ENTRY_BYTES,
        content: bool = False,
    ) -> RequestEntry:
        """The entry of a request whose body (None: not read whole) is this, keeping
        at most ``keep`` bytes of header fields and body; the body is kept only with
        ``content`` (``--log-content``)."""
        kept, truncated = _kept_headers(headers, min(keep, HEADERS_KEEP))
        # ``used``: the characters kept, which ``keep`` bounds; ``held`` adds what their
        # objects cost.
        used = sum(len(n) + len(v) for n, v in kept)
        objects = ENTRY_OVERHEAD + FIELD_OVERHEAD * len(kept)
        entry = cls(
            method=method,
            path=redact_path(path),
            headers=kept,
            body=None,
            size=None if body is None else len(body),
            sha256=None if body is None else hashlib.sha256(body).hexdigest(),
            view=NOTHING,
            headers_truncated=truncated,
        )
        objects += len(entry.path) + (64 if entry.sha256 is not None else 0)
        if body is not None:
            parsed, deep = _readable(body)
            if deep:
                entry.omitted = "depth"
            else:
                view = read_request(path, parsed)
                tools = tuple(_name(t) for t in view.tools[:MAX_TOOLS])
                model = None if view.model is None else _name(view.model)
                entry.view = RequestView(model, (), tools, view.stream)
                entry.messages = len(view.messages)
                objects += sum(len(t) + 64 for t in tools) + len(model or "")
                if not content:
                    entry.omitted = "content"
                elif used + len(body) > keep:
                    entry.omitted = "size"
                else:
                    entry.body = body
                    used += len(body)
                if entry.omitted is not None:
                    cost = len(view.messages) * _DIGEST_BYTES
                    if used + cost <= keep:
                        entry.digests = tuple(_digest(m) for m in view.messages)
                        used += cost
                        objects += len(view.messages) * DIGEST_OVERHEAD
        entry.held = used + objects
        return entry

    def line_fields(self, content: bytes | None = None) -> dict[str, Any]:
        """The fields it adds to the ``request`` line; with ``content`` (the body as
        received, given with ``--log-content``), also ``body``, masked (not when it
        nests too deep to be read: its hash says which it was)."""
        if self.size is None:
            return {}
        fields: dict[str, Any] = {}
        view = self.view
        if view.model is not None:
            fields["model"] = view.model
        if self.messages:
            fields["messages"] = self.messages
        if view.tools:
            fields["tools"] = list(view.tools)
        fields["body_bytes"] = self.size
        fields["body_sha256"] = self.sha256
        if content is not None and self.omitted != "depth":
            fields["body"] = body_text(content)
        return fields

    def as_dict(self) -> JournalRequest:
        """The parsed request, as the admin API and ``proxy.requests()`` show it:
        ``method``, ``path``, ``headers`` (and ``headers_truncated`` when some were
        left out), ``model``, ``stream``, ``messages`` (role and text each), ``tools``
        (names), ``body`` (the JSON value, else the text), and
        ``body_sha256``/``body_bytes``; a body the journal does not keep has no
        ``body``, and ``body_omitted: true`` with ``body_omitted_reason``, its messages
        shown as role, length and hash (or how many)."""
        out: JournalRequest = {
            "method": self.method,
            "path": self.path,
            "headers": masked_headers(self.headers),
        }
        if self.headers_truncated is not None:
            out["headers_truncated"] = self.headers_truncated
        if self.size is None or self.sha256 is None:
            return out
        out["model"] = self.view.model
        out["stream"] = self.view.stream
        out["tools"] = list(self.view.tools)
        if self.body is None:
            digests = self.digests
            out["messages"] = self.messages if digests is None else [d.as_dict() for d in digests]
            out["body_omitted"] = True
            if self.omitted is not None:
                out["body_omitted_reason"] = self.omitted
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
    """A body as text, credentials masked (JSON re-encoded compactly; a body nested
    too deep to read, as its size and hash)."""
    parsed, deep = _readable(body)
    if deep:
        digest = hashlib.sha256(body).hexdigest()
        return f"(JSON nested deeper than {MAX_DEPTH} levels: {len(body)} bytes, sha256 {digest})"
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


def _texts(request: JournalRequest) -> Iterable[str]:
    """The texts ``contains=`` searches: the messages' and every string of the body."""
    messages = request.get("messages")
    if isinstance(messages, list):
        yield from (m["text"] for m in messages if "text" in m)
    yield from _strings(request.get("body"))


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
        if request is not None and request.get("body_omitted_reason") == "content":
            raise ContentNotKept(criteria.contains)
        texts = _texts(request) if request is not None else []
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


#: What ``contains=`` is told by a journal that keeps no prompts.
NO_CONTENT = (
    "contains= searches the prompts, and this proxy's journal keeps them only with "
    "--log-content (CHAOSPROXY_LOG_CONTENT=1; ChaosProxy(log_content=True)): without it, "
    "each message is kept as its role, length and sha256"
)


class ContentNotKept(ValueError):
    """``contains=`` asked of a journal that keeps no prompts (no ``--log-content``)."""

    def __init__(self, contains: str) -> None:
        super().__init__(NO_CONTENT)
        self.contains = contains


def matches(summary: _Summary, criteria: Criteria) -> bool:
    """Whether the request meets every given criterion: ``model`` and ``path`` are
    ``fnmatch`` globs (an exact name is one), ``contains`` a substring of any text of the
    request (its messages, its system prompt, its tools' names and descriptions),
    ``tool`` the name of a tool it offers, ``scenario`` its scenario's name.
    :class:`ContentNotKept` when ``contains`` is asked of a request whose prompts the
    journal did not keep (no ``--log-content``)."""
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
                (m["text"] for m in messages[::-1] if m["role"] == "user" and "text" in m),
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
    "DEFAULT_ENTRY_BYTES",
    "MAX_DEPTH",
    "NO_CONTENT",
    "ContentNotKept",
    "Criteria",
    "MessageDigest",
    "RequestEntry",
    "VerificationError",
    "masked_body",
    "masked_headers",
    "matches",
    "misses",
    "verify",
]
