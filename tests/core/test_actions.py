"""Actions, what the core asks the shell to do (chaosproxy/core/actions.py): a write
with its events, ends and faults; equal actions compare and hash alike, a cut's log
detail aside; the shapes every stage may ask for."""

from __future__ import annotations

import dataclasses
import math

import pytest

from chaosproxy.core.actions import (
    Cut,
    CutRequest,
    HoldRequest,
    Respond,
    Send,
    Sleep,
)
from chaosproxy.core.events import Event
from chaosproxy.core.frames import Frame

EVENT = Event(Frame(b"data: a\n\n", data="a"), 1, frozenset({"delta"}))


def test_a_send_is_its_bytes_and_by_default_nothing_more() -> None:
    send = Send(b"data: a\n\n")
    assert (send.data, send.events, send.ends, send.faults) == (b"data: a\n\n", (), 0, ())
    full = Send(b"data: a\n\n", (EVENT,), 1, ("rechunk",))
    assert full == Send(b"data: a\n\n", (EVENT,), 1, ("rechunk",))
    assert hash(full) == hash(Send(b"data: a\n\n", (EVENT,), 1, ("rechunk",)))
    assert full != send


def test_a_cuts_detail_is_for_the_log_not_its_identity() -> None:
    assert Cut("abort", detail={"after_event": 6}) == Cut("abort")
    assert Cut("abort") != Cut("reset")
    assert Cut("close").fault == "cut"
    assert Cut("close").detail == {}
    assert Cut("close").detail is not Cut("close").detail  # each its own


def test_the_stages_actions_have_their_defaults_and_cannot_change() -> None:
    assert Sleep(math.inf) == Sleep(math.inf, "")
    assert HoldRequest(2.0).fault == "request_delay"
    assert (CutRequest("reset").after_bytes, CutRequest("reset").fault) == (0, "request_cut")
    respond = Respond(503, {"Retry-After": "1"}, b"busy")
    with pytest.raises(dataclasses.FrozenInstanceError):
        respond.status = 200  # type: ignore[misc]
