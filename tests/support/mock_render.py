"""One provider's mock rendering, read back: a request served by a mock module's
``serve`` (no sockets, no pacing), and what the recorder (chaosproxy/mock/transcript.py)
reads of the rendered body: the fixture it is, or why it is none."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import orjson

from chaosproxy.core.llm_request import read_request
from chaosproxy.mock.common import Knobs, MockCall, MockResponse
from chaosproxy.mock.transcript import NotRecorded, Transcript
from chaosproxy.scenario import Fixture

KNOBS = Knobs(tokens=8, interval=0.0)


def served(
    module: ModuleType,
    payload: Mapping[str, Any],
    fixture: Mapping[str, Any] | None = None,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
) -> MockResponse:
    """``module``'s answer to ``payload`` (answered by ``fixture`` when given)."""
    body = orjson.dumps(dict(payload))
    call = MockCall(
        body=body,
        payload=dict(payload),
        knobs=KNOBS,
        fixture=None if fixture is None else Fixture.model_validate(fixture),
        params=params or {},
        query=query or {},
    )
    response: MockResponse = module.serve(call)
    return response


def read_back(
    path: str, payload: Mapping[str, Any], response: MockResponse
) -> dict[str, Any] | str:
    """What the recorder reads of ``response`` as the answer to ``payload`` at ``path``:
    the fixture's mapping (its name left out), or why it records none."""
    transcript = Transcript(path, response.status, response.content_type)
    for chunk in response.chunks:
        transcript.feed(chunk)
    transcript.end()
    try:
        fixture = transcript.fixture(read_request(path, dict(payload)))
    except NotRecorded as exc:
        return str(exc)
    item = fixture.as_dict()
    item.pop("name", None)
    item.pop("match", None)
    return item
