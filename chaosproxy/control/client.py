"""``ChaosClient``: the runtime calls of :class:`~chaosproxy.ChaosProxy`, against a
running chaosproxy (a sidecar, a container) over its admin API (docs/python-api.md, ChaosClient;
docs/admin-api.md).

::

    chaos = ChaosClient("http://127.0.0.1:8478", token=os.environ.get("ADMIN_TOKEN"))
    with chaos.scenario("cut-before-terminal-reset"):
        run_my_client()
    assert chaos.last()["outcome"] == "cut"

Standard library only (``urllib``), so it adds nothing to what a test environment
installs. Every call is synchronous.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import orjson

from chaosproxy.control.api import (
    SETTLE,
    RequestQueries,
    fixture_text,
    is_scenario_name,
    scenario_text,
)
from chaosproxy.core.records import AdminSummary, DoneSummary, RequestSummary, RunVerdict
from chaosproxy.core.verdict import ClientReport
from chaosproxy.observe.journal import Criteria
from chaosproxy.scenario import Fixture

#: ``GET /requests`` asks for at most this many (the proxy keeps fewer: ``--history``).
ALL = 1_000_000
#: How often the calls that wait for requests in flight ask again.
POLL = 0.02


class ChaosClientError(Exception):
    """The admin API answered with an error (``status``), or could not be reached
    (``status`` 0). ``problems`` lists a refused scenario's problems."""

    def __init__(self, message: str, status: int = 0, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problems = problems or []


class ChaosAuthError(ChaosClientError):
    """401: the admin API wants a token, or another one."""


class ChaosClient(RequestQueries):
    """The admin API of a running chaosproxy at ``admin_url`` (its ``--admin``
    address, ``http://HOST:PORT``), with ``token`` its ``--admin-token``."""

    def __init__(self, admin_url: str, token: str | None = None, *, timeout: float = 10.0) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._blocks = itertools.count(1)

    def __repr__(self) -> str:
        return f"ChaosClient({self.admin_url!r})"  # never the token

    # ------------------------------------------------------------------ transport

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        query: Mapping[str, str] | None = None,
    ) -> Any:
        url = self.admin_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if body:
            json = body.lstrip().startswith(b"{")
            headers["Content-Type"] = "application/json" if json else "application/yaml"
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return orjson.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                raise _error(exc.code, exc.read(), method, url, self.token) from None
        except urllib.error.URLError as exc:
            raise ChaosClientError(
                f"cannot reach the chaosproxy admin API at {self.admin_url}: {exc.reason}"
            ) from None

    # ------------------------------------------------------------------ scenarios

    def scenarios(self) -> list[dict[str, Any]]:
        """Every loaded scenario, as ``GET /scenarios`` shows it."""
        scenarios: list[dict[str, Any]] = self._call("GET", "/scenarios")["scenarios"]
        return scenarios

    def get_scenario(self, name: str) -> dict[str, Any]:
        """One scenario in the shape of its file (``GET /scenarios/{name}``)."""
        scenario: dict[str, Any] = self._call("GET", "/scenarios/" + _quote(name))
        return scenario

    def default(self) -> str | None:
        """The current default scenario (None: passthrough)."""
        default: str | None = self._call("GET", "/scenarios")["default"]
        return default

    def use(self, name: str | None) -> None:
        """Make ``name`` the default scenario (``None``: passthrough)."""
        self._call("PUT", "/default", orjson.dumps({"scenario": name}))

    def add_scenario(self, scenario: str | Mapping[str, Any], name: str | None = None) -> str:
        """Add (or replace) a scenario given as YAML text or a mapping; returns its
        name. ChaosClientError (status 400, ``problems``) when it is not valid."""
        query = {"name": name} if name is not None else None
        added = self._call("POST", "/scenarios", _bytes(scenario_text(scenario)), query=query)
        if name is not None and added["name"] != name:
            raise ValueError(f"name {name!r} given, but the scenario says name: {added['name']}")
        result: str = added["name"]
        return result

    def remove_scenario(self, name: str) -> None:
        self._call("DELETE", "/scenarios/" + _quote(name))

    @contextlib.contextmanager
    def scenario(self, name_or_yaml: str | Mapping[str, Any]) -> Iterator[str]:
        """The default scenario for the block, as :meth:`ChaosProxy.scenario`: a name,
        or a scenario added for the block (then removed, or the one it replaced put
        back). The previous default is restored after. Yields the name."""
        previous = self.default()
        added: str | None = None
        replaced: dict[str, Any] | None = None
        if isinstance(name_or_yaml, str) and is_scenario_name(name_or_yaml):
            name = name_or_yaml
        else:
            block = f"block-{next(self._blocks)}"
            text = _bytes(scenario_text(name_or_yaml))
            known = {s["name"]: s for s in self.scenarios()}
            added = self._call("POST", "/scenarios", text, query={"name": block})["name"]
            replaced = known.get(added)
            name = added
        try:
            self.use(name)
            yield name
        finally:
            if replaced is not None:
                self._call("POST", "/scenarios", orjson.dumps(replaced))
            elif added is not None:
                with contextlib.suppress(ChaosClientError):
                    self.remove_scenario(added)
            try:
                self.use(previous)
            except ChaosClientError:  # the previous default was removed in the block
                self.use(None)

    # ------------------------------------------------------------------ requests

    def _finished_requests(self, criteria: Criteria, settle: float) -> list[RequestSummary]:
        # The proxy filters; this waits for those in flight, polling.
        query = {"limit": str(ALL)}
        query.update(criteria.given())
        deadline = time.monotonic() + settle
        while True:
            recent = self._all_pages(query)
            if all(r["state"] == "done" for r in recent) or time.monotonic() >= deadline:
                break
            time.sleep(POLL)
        return [_summary(r) for r in reversed(recent) if r["state"] == "done"]

    def _all_pages(self, query: Mapping[str, str]) -> list[AdminSummary]:
        """Every summary ``GET /requests`` lists for ``query``, newest first, page after
        page (a page holds 1 MiB at most: docs/admin-api.md)."""
        found: list[AdminSummary] = []
        cursor: str | None = None
        while True:
            ask = dict(query) if cursor is None else {**query, "cursor": cursor}
            page = self._call("GET", "/requests", query=ask)
            found += page["requests"]
            cursor = page.get("next")
            if cursor is None:
                return found

    # ------------------------------------------------------------------ mock fixtures

    def add_fixture(self, fixture: str | Mapping[str, Any] | Fixture) -> None:
        """``POST /mock/fixtures``: add mock fixtures (one, or a fixture file's
        ``{"fixtures": [...]}``), as :meth:`ChaosProxy.add_fixture`. ChaosClientError
        with status 400 (``problems``) when not valid, 409 when no upstream of the proxy
        is the built-in mock."""
        self._call("POST", "/mock/fixtures", _bytes(fixture_text(fixture)))

    def clear_fixtures(self) -> None:
        """``DELETE /mock/fixtures``: remove the fixtures added at run time."""
        self._call("DELETE", "/mock/fixtures")

    def summary(self, request_id: str, timeout: float = SETTLE) -> RequestSummary:
        """The summary of a finished request, waiting up to ``timeout`` seconds for it
        to end; KeyError when the proxy does not know it or it has not ended."""
        shown: AdminSummary = self._detail(request_id, timeout)["summary"]
        if shown["state"] != "done":  # (timeout 0: not waited for)
            raise KeyError(request_id)
        return _summary(shown)

    def frames(self, request_id: str) -> list[dict[str, Any]]:
        """The ``frame`` lines the proxy kept of a request (``--history-frames``)."""
        frames: list[dict[str, Any]] = self._detail(request_id, 0.0)["frames"]
        return frames

    def _record_verdict(
        self, request_id: str, report: ClientReport, requests: Sequence[str], timeout: float
    ) -> RunVerdict:
        # POST /requests/{id}/verdict
        for rid in (request_id, *requests):
            self._detail(rid, timeout)
        fields: dict[str, Any] = {
            "text": report.text,
            "error": report.error,
            "timed_out": report.timed_out,
        }
        if requests:
            fields["requests"] = list(requests)
        body = orjson.dumps(fields)
        try:
            verdict: RunVerdict = self._call(
                "POST", "/requests/" + _quote(request_id) + "/verdict", body
            )
        except ChaosClientError as exc:
            if exc.status == 404:
                raise KeyError(request_id) from None
            raise
        return verdict

    def _detail(self, request_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                detail: dict[str, Any] = self._call("GET", "/requests/" + _quote(request_id))
            except ChaosClientError as exc:
                if exc.status == 404:
                    raise KeyError(request_id) from None
                raise
            if detail["summary"]["state"] == "done":
                return detail
            if time.monotonic() >= deadline:
                if timeout > 0:
                    raise KeyError(request_id)
                return detail
            time.sleep(POLL)

    def reset(self) -> None:
        """``POST /reset``: back to the proxy's state at start-up."""
        self._call("POST", "/reset", b"")


def _error(status: int, body: bytes, method: str, url: str, token: str | None) -> ChaosClientError:
    if status == 401:
        why = "no token was given" if token is None else "the token was refused"
        return ChaosAuthError(
            f"the chaosproxy admin API at {url} answered 401 Unauthorized: {why}; "
            "pass ChaosClient(admin_url, token=...) the proxy's --admin-token",
            status,
        )
    message = f"{method} {url}: {status}"
    problems: list[str] = []
    with contextlib.suppress(orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        parsed = orjson.loads(body)
        message = f"{message}: {parsed['error']['message']}"
        problems = [str(p) for p in parsed.get("problems", [])]
    if problems:
        message += "".join(f"\n  {p}" for p in problems)
    return ChaosClientError(message, status, problems)


def _summary(view: DoneSummary) -> RequestSummary:
    """A finished request's summary as ``GET /requests`` shows it, without ``state``."""
    return cast("RequestSummary", {k: v for k, v in view.items() if k != "state"})


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _bytes(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


__all__ = ["ChaosAuthError", "ChaosClient", "ChaosClientError"]
