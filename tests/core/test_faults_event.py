"""Event faults (docs/faults-event.md), Playbook style: bytes in, Sends out.

Most tests run a real :class:`Pipeline` (framer, profile, faults) over a small literal
body and assert the exact bytes of every write, the upstream ordinal of the event it
carries and the faults that shaped it. A few feed the same body split at every byte to
show the result does not depend on how upstream chunked it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, get_args

import orjson
import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.events import Event
from chaosproxy.core.faults import build_faults, registry
from chaosproxy.core.faults.base import FaultConfig, fault_rng
from chaosproxy.core.faults.bom import BomConfig
from chaosproxy.core.faults.comment import CommentConfig
from chaosproxy.core.faults.corrupt import CorruptConfig
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.ids import IdsConfig
from chaosproxy.core.faults.inject import InjectConfig
from chaosproxy.core.faults.line_endings import LineEndingsConfig
from chaosproxy.core.faults.mutate import MutateConfig
from chaosproxy.core.faults.oversize import OversizeConfig, OversizeFault, oversize_payload
from chaosproxy.core.faults.reorder import ReorderConfig
from chaosproxy.core.faults.splice import SpliceConfig
from chaosproxy.core.frames import Format, Frame
from chaosproxy.core.framing import parse_block
from chaosproxy.core.framing.encode import replace_data, split_lines
from chaosproxy.core.pipeline import Pipeline
from chaosproxy.core.providers import get_profile

Spec = tuple[str, FaultConfig]

# A small generic stream: four events (ordinals 1-4) and a keepalive comment (ordinal 0).
E1 = b'data: {"n":1}\n\n'
PING = b": ping\n\n"
E2 = b'data: {"n":2}\n\n'
E3 = b'data: {"n":3}\n\n'
DONE = b"data: [DONE]\n\n"
BODY = E1 + PING + E2 + E3 + DONE
ORDINALS = [1, 0, 2, 3, 4]

NDJSON = b'{"n":1}\n{"n":2}\n{"n":3,"done":true}\n'

ANTHROPIC = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


class Run:
    """The Sends one pipeline made, and the pipeline (for its summary)."""

    def __init__(self, sends: list[Send], pipeline: Pipeline) -> None:
        self.sends = sends
        self.pipeline = pipeline

    @property
    def data(self) -> list[bytes]:
        return [s.data for s in self.sends]

    @property
    def body(self) -> bytes:
        return b"".join(self.data)

    @property
    def events(self) -> list[Event]:
        return [e for s in self.sends for e in s.events]

    @property
    def ordinals(self) -> list[int]:
        return [e.ordinal for e in self.events]

    @property
    def faults(self) -> list[tuple[str, ...]]:
        return [s.faults for s in self.sends]

    @property
    def applied(self) -> dict[str, int]:
        return self.pipeline.summary()[0]

    @property
    def skipped(self) -> list[dict[str, object]]:
        return self.pipeline.summary()[1]


def run(
    specs: Sequence[Spec],
    body: bytes | Sequence[bytes],
    *,
    seed: int = 7,
    fmt: Format = "sse",
    provider: str = "generic",
) -> Run:
    """Feed ``body`` (one chunk, or the given chunks) through a fresh pipeline."""
    profile = get_profile(provider)
    pipeline = Pipeline(build_faults(list(specs), seed, fmt, profile), fmt, profile)
    chunks = [body] if isinstance(body, bytes) else list(body)
    actions = [a for chunk in chunks for a in pipeline.feed(chunk, 0.0)]
    actions += pipeline.end(0.0)
    assert all(isinstance(a, Send) for a in actions), actions
    sends = [a for a in actions if isinstance(a, Send)]
    for s in sends:  # one write per event: a Send is exactly its event's bytes
        assert s.events and s.data == b"".join(e.raw for e in s.events)
        assert s.faults == s.events[0].faults
    return Run(sends, pipeline)


def splits(body: bytes) -> list[list[bytes]]:
    """The body cut in two at every point, and byte by byte."""
    cuts = [[body[:i], body[i:]] for i in range(1, len(body))]
    return [*cuts, [body[i : i + 1] for i in range(len(body))]]


def assert_chunking_independent(specs: Sequence[Spec], body: bytes, **kw: Any) -> Run:
    whole = run(specs, body, **kw)
    for chunks in splits(body):
        other = run(specs, chunks, **kw)
        assert other.data == whole.data, chunks
        assert other.ordinals == whole.ordinals
        assert other.faults == whole.faults
        assert other.pipeline.summary() == whole.pipeline.summary()
    return whole


def inject_cfg(**values: Any) -> InjectConfig:
    """An inject config from a mapping, as a scenario file gives it."""
    return InjectConfig.model_validate(values)


def ev(raw: bytes, ordinal: int, fmt: Format = "sse") -> Event:
    """An event built directly (for tests that call a fault's hooks)."""
    frame = parse_block(raw, fmt)
    return Event(frame, ordinal, get_profile("generic").classify(frame) if ordinal else frozenset())


# --------------------------------------------------------------------------- all faults

EVENT_FAULTS = [
    "bom",
    "comment",
    "corrupt",
    "drop",
    "duplicate",
    "ids",
    "inject",
    "interleave_tool_calls",
    "line_endings",
    "mutate",
    "oversize",
    "reorder",
    "resegment",
    "snapshot",
    "splice",
    "split_tool_args",
]


def test_registry_has_every_event_fault() -> None:
    faults = registry()
    for name in EVENT_FAULTS:
        cls = faults[name]
        assert cls.name == name and cls.stage == "event"
        assert cls.Config.model_config.get("frozen") is True
        assert cls.Config.model_config.get("extra") == "forbid"


def test_a_faults_config_is_the_argument_of_its_base() -> None:
    """``class XFault(Fault[XConfig], name="x", stage=...)``: ``XConfig`` is its
    ``Config`` (said once), ``name`` and ``stage`` its keywords."""
    for name, cls in registry().items():
        (base,) = cls.__orig_bases__  # type: ignore[attr-defined]
        assert get_args(base) == (cls.Config,), name
        assert cls.Config.__name__ == cls.__name__.removesuffix("Fault") + "Config"
        assert cls.name == name and cls.stage in ("http", "event", "transport")


@pytest.mark.parametrize(
    "spec",
    [
        ("drop", DropConfig(nth=9)),
        ("duplicate", DuplicateConfig(kind="error")),
        ("reorder", ReorderConfig(type="nope")),
        ("inject", inject_cfg(after=9, event={"data": "x"})),
        ("mutate", MutateConfig(nth=9, set={"a": 1})),
        ("corrupt", CorruptConfig(match="nowhere", mode="invalid_json")),
        ("oversize", OversizeConfig(after=9, bytes=10)),
        ("line_endings", LineEndingsConfig(style="lf")),
        ("comment", CommentConfig(every=9)),
        ("splice", SpliceConfig.model_validate({"from": "previous", "after": 9})),
    ],
    ids=lambda s: s[0],
)
def test_a_fault_that_never_applies_forwards_every_byte(spec: Spec) -> None:
    r = run([spec], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.ordinals == ORDINALS
    assert r.faults == [()] * 5
    assert r.applied == {}
    [skip] = r.skipped
    assert skip["fault"] == spec[0] and skip["reason"]


def test_every_event_fault_needs_framing() -> None:
    assert registry()["drop"].needs_framing(DropConfig())
    assert registry()["bom"].needs_framing(BomConfig())


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (DuplicateConfig, {"times": 0}),
        (DuplicateConfig, {"times": True}),
        (DuplicateConfig, {"tims": 2}),
        (DropConfig, {"nth": 0}),
        (DropConfig, {"kind": "deltas"}),
        (ReorderConfig, {"window": 1}),
        (ReorderConfig, {"mode": "sort"}),
        (InjectConfig, {"event": {"data": "x"}}),
        (InjectConfig, {"after": 1, "before": 2, "event": {"data": "x"}}),
        (InjectConfig, {"after": 0, "event": {"data": "x"}}),
        (InjectConfig, {"after": "middle", "event": {"data": "x"}}),
        (InjectConfig, {"after": 1}),
        (InjectConfig, {"after": 1, "event": {}}),
        (InjectConfig, {"after": 1, "event": {"data": "x", "raw": "y"}}),
        (InjectConfig, {"after": 1, "event": {"raw": "y", "event": "e"}}),
        (InjectConfig, {"after": 1, "event": {"kind": "error", "id": "1"}}),
        (InjectConfig, {"after": 1, "event": {"kind": "delta"}}),
        (InjectConfig, {"after": 1, "event": {"data": 42}}),
        (InjectConfig, {"after": 1, "event": {"data": "x", "event": "a\nb"}}),
        (InjectConfig, {"after": 1, "event": {"data": {"big": 2**70}}}),
        (InjectConfig, {"after": 1, "times": 0, "event": {"data": "x"}}),
        (MutateConfig, {}),
        (MutateConfig, {"set": {}}),
        (MutateConfig, {"delete": []}),
        (MutateConfig, {"set": {"a..b": 1}}),
        (MutateConfig, {"delete": [""]}),
        (MutateConfig, {"set": {"a": 2**70}}),
        (CorruptConfig, {}),
        (CorruptConfig, {"mode": "scramble"}),
        (OversizeConfig, {"after": 1}),
        (OversizeConfig, {"after": -1, "bytes": 10}),
        (OversizeConfig, {"after": 1, "bytes": 0}),
        (OversizeConfig, {"after": 1, "bytes": 64 * 1024 * 1024 + 1}),
        (OversizeConfig, {"after": 1, "bytes": 10, "terminated": "no"}),
        (LineEndingsConfig, {}),
        (LineEndingsConfig, {"style": "crcr"}),
        (BomConfig, {"at": 1}),
        (CommentConfig, {"every": 0}),
        (CommentConfig, {"text": 5}),
        (IdsConfig, {"start": -1}),
        (IdsConfig, {"retry": -5}),
        (IdsConfig, {"retry": "1s"}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


def test_validation_messages_say_what_is_wrong() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        ReorderConfig.model_validate({"window": 1})
    with pytest.raises(ValidationError, match="exactly one of after, before"):
        InjectConfig.model_validate({"event": {"data": "x"}})
    with pytest.raises(ValidationError, match=r"exactly one of data, raw, kind \(got data, raw\)"):
        InjectConfig.model_validate({"after": 1, "event": {"data": "x", "raw": "y"}})
    with pytest.raises(ValidationError, match="event and id go with data"):
        InjectConfig.model_validate({"after": 1, "event": {"raw": "y", "id": "1"}})
    with pytest.raises(ValidationError, match="give set and/or delete"):
        MutateConfig.model_validate({})
    with pytest.raises(ValidationError, match=r"bad path 'a\.\.b'"):
        MutateConfig.model_validate({"delete": ["a..b"]})
    with pytest.raises(ValidationError, match="less than or equal to 67108864"):
        OversizeConfig.model_validate({"after": 1, "bytes": 2**26 + 1})


def test_configs_are_frozen() -> None:
    cfg = DuplicateConfig(times=2)
    with pytest.raises(ValidationError):
        cfg.times = 3


# --------------------------------------------------------------------------- drop


def test_drop_nth() -> None:
    r = run([("drop", DropConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, DONE]
    assert r.ordinals == [1, 0, 3, 4]
    assert r.applied == {"drop": 1}
    assert r.skipped == []


def test_drop_by_kind_and_match() -> None:
    assert run([("drop", DropConfig(kind="terminal"))], BODY).data == [E1, PING, E2, E3]
    assert run([("drop", DropConfig(match=r'"n":[13]'))], BODY).data == [PING, E2, DONE]


def test_drop_every_event_keeps_comments() -> None:
    r = run([("drop", DropConfig())], BODY)
    assert r.data == [PING]
    assert r.applied == {"drop": 4}


def test_drop_is_independent_of_chunking() -> None:
    r = assert_chunking_independent([("drop", DropConfig(nth=[1, 3]))], BODY)
    assert r.data == [PING, E2, DONE]


def test_drop_skipped_reason_names_the_missing_ordinal() -> None:
    r = run([("drop", DropConfig(nth=9))], BODY)
    assert r.skipped == [
        {
            "fault": "drop",
            "position": 0,
            "reason": "ordinal 9 never reached: the stream had 4 events",
        }
    ]


# --------------------------------------------------------------------------- duplicate


def test_duplicate_once_by_default() -> None:
    r = run([("duplicate", DuplicateConfig(nth=3))], BODY)
    assert r.data == [E1, PING, E2, E3, E3, DONE]
    assert r.ordinals == [1, 0, 2, 3, 3, 4]
    assert r.faults == [(), (), (), (), ("duplicate",), ()]
    assert r.applied == {"duplicate": 1}


def test_duplicate_times() -> None:
    r = run([("duplicate", DuplicateConfig(kind="terminal", times=3))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE, DONE, DONE, DONE]
    assert r.ordinals == [1, 0, 2, 3, 4, 4, 4, 4]
    assert r.pipeline.events_in == 4 and r.pipeline.events_out == 7


def test_duplicate_then_drop_counts_upstream_ordinals() -> None:
    # The copy of event 2 is not event 3: drop nth 3 still drops upstream event 3.
    r = assert_chunking_independent(
        [("duplicate", DuplicateConfig(nth=2)), ("drop", DropConfig(nth=3))], BODY
    )
    assert r.data == [E1, PING, E2, E2, DONE]
    assert r.ordinals == [1, 0, 2, 2, 4]
    assert r.applied == {"duplicate": 1, "drop": 1}


def test_drop_after_duplicate_drops_every_copy() -> None:
    r = run([("duplicate", DuplicateConfig(nth=2)), ("drop", DropConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, DONE]
    assert r.applied == {"duplicate": 1, "drop": 2}


# --------------------------------------------------------------------------- reorder


def test_reorder_reverse_window_2() -> None:
    r = run([("reorder", ReorderConfig(nth=2))], BODY)
    assert r.data == [E1, PING, E3, E2, DONE]
    assert r.ordinals == [1, 0, 3, 2, 4]
    assert r.faults == [(), (), ("reorder",), ("reorder",), ()]
    assert r.applied == {"reorder": 1}


def test_reorder_window_counts_comments_too() -> None:
    r = assert_chunking_independent([("reorder", ReorderConfig(nth=1, window=3))], BODY)
    assert r.data == [E2, PING, E1, E3, DONE]
    assert r.ordinals == [2, 0, 1, 3, 4]


def test_reorder_holds_then_starts_again_at_the_next_selected_event() -> None:
    r = run([("reorder", ReorderConfig(window=2))], BODY)
    # Groups: (1, ping), (2, 3), (4 alone at the end: nothing to swap).
    assert r.data == [PING, E1, E3, E2, DONE]
    assert r.applied == {"reorder": 2}


def test_reorder_releases_a_partial_group_at_the_end() -> None:
    r = run([("reorder", ReorderConfig(nth=3, window=5))], BODY)
    assert r.data == [E1, PING, E2, DONE, E3]
    assert r.applied == {"reorder": 1}


def test_reorder_shuffle_is_seeded() -> None:
    spec = ("reorder", ReorderConfig(nth=1, window=5, mode="shuffle"))
    r = run([spec], BODY, seed=7)
    assert r.ordinals == [4, 2, 0, 3, 1]  # seed 7, fault 0
    order = list(range(5))
    fault_rng(7, 0, "reorder").shuffle(order)
    assert r.data == [[E1, PING, E2, E3, DONE][i] for i in order]
    assert run([spec], BODY, seed=7).data == r.data
    assert run([spec], BODY, seed=8).data != r.data


def test_reorder_skipped_when_no_group_changed_order() -> None:
    r = run([("reorder", ReorderConfig(kind="terminal"))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.skipped[0]["reason"] == (
        "1 group(s) held, none changed order"
        " (a group of one at the end of the stream, or a shuffle that kept it)"
    )


# --------------------------------------------------------------------------- inject

X = b"data: x\n\n"


def test_inject_after_ordinal() -> None:
    r = run([("inject", inject_cfg(after=2, event={"data": "x"}))], BODY)
    assert r.data == [E1, PING, E2, X, E3, DONE]
    assert r.ordinals == [1, 0, 2, 0, 3, 4]
    assert r.faults == [(), (), (), ("inject",), (), ()]
    assert r.sends[3].events[0].kinds == {"other"}
    assert r.applied == {"inject": 1}


def test_inject_before_ordinal_with_fields_and_times() -> None:
    spec = inject_cfg(before=1, times=2, event={"event": "note", "id": "7", "data": "a\nb"})
    r = run([("inject", spec)], BODY)
    made = b"event: note\nid: 7\ndata: a\ndata: b\n\n"
    assert r.data == [made, made, E1, PING, E2, E3, DONE]
    assert r.ordinals == [0, 0, 1, 0, 2, 3, 4]
    assert r.applied == {"inject": 1}


def test_inject_a_delta_after_completion() -> None:
    spec = inject_cfg(after="terminal", event={"data": {"n": 5, "text": "é"}})
    r = assert_chunking_independent([("inject", spec)], BODY)
    assert r.data == [E1, PING, E2, E3, DONE, 'data: {"n":5,"text":"é"}\n\n'.encode()]


def test_inject_a_second_terminal_classified_by_the_profile() -> None:
    r = run([("inject", inject_cfg(after="terminal", event={"data": "[DONE]"}))], BODY)
    assert r.data[-2:] == [DONE, DONE]
    assert r.sends[-1].events[0].kinds == {"terminal"}
    assert r.sends[-1].events[0].ordinal == 0


def test_inject_before_start_in_the_stream_line_ending() -> None:
    crlf = ANTHROPIC.replace(b"\n", b"\r\n")
    spec = inject_cfg(before="start", event={"event": "ping", "data": {"type": "ping"}})
    r = run([("inject", spec)], crlf, provider="anthropic")
    assert r.data[0] == b'event: ping\r\ndata: {"type":"ping"}\r\n\r\n'
    assert r.sends[0].events[0].kinds == {"ping"}
    assert r.body[len(r.data[0]) :] == crlf


def test_inject_raw_is_sent_verbatim() -> None:
    raw = 'data: {"foreign":true}\r\nid: 9\n\n'
    r = run([("inject", inject_cfg(after=1, event={"raw": raw}))], BODY)
    assert r.data == [E1, raw.encode(), PING, E2, E3, DONE]
    frame = r.sends[1].events[0].frame
    assert (frame.data, frame.id, frame.complete) == ('{"foreign":true}', "9", True)


def test_inject_the_providers_own_error_event() -> None:
    spec = inject_cfg(after=2, event={"kind": "error"})
    r = run([("inject", spec)], ANTHROPIC, provider="anthropic")
    error = get_profile("anthropic").error_event("sse", b"\n")
    assert r.data[2] == error
    assert r.sends[2].events[0].kinds == {"error"}
    assert r.body == ANTHROPIC.replace(
        b"\n\nevent: message_stop", b"\n\n" + error + b"event: message_stop"
    )


def test_inject_error_event_ndjson() -> None:
    spec = inject_cfg(before="terminal", event={"kind": "error"})
    r = run([("inject", spec)], NDJSON, fmt="ndjson", provider="ollama")
    error = get_profile("ollama").error_event("ndjson")
    assert r.data == [b'{"n":1}\n', b'{"n":2}\n', error, b'{"n":3,"done":true}\n']
    assert r.sends[2].events[0].kinds == {"error"}


def test_inject_ndjson_data_is_one_line() -> None:
    spec = inject_cfg(after=1, event={"data": {"extra": [1, 2]}, "event": "ignored"})
    r = run([("inject", spec)], NDJSON, fmt="ndjson")
    assert r.data[:2] == [b'{"n":1}\n', b'{"extra":[1,2]}\n']


def test_inject_never_reached_is_skipped_with_a_reason() -> None:
    spec = inject_cfg(after="terminal", event={"data": "x"})
    r = run([("inject", spec)], E1 + E2)
    assert r.data == [E1, E2]
    assert (
        r.skipped[0]["reason"] == "after: terminal never reached: the stream had no terminal event"
    )
    r = run([("inject", inject_cfg(before=5, event={"data": "x"}))], BODY)
    assert r.skipped[0]["reason"] == "before: 5 never reached: the stream had 4 events"


def test_inject_after_an_event_an_earlier_fault_dropped() -> None:
    # Event 2 is gone: the injection goes where it was, before event 3.
    specs: list[Spec] = [
        ("drop", DropConfig(nth=2)),
        ("inject", inject_cfg(after=2, event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, PING, X, E3, DONE]
    # The last event is gone: the injection goes at the end.
    specs = [
        ("drop", DropConfig(kind="terminal")),
        ("inject", inject_cfg(after="terminal", event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, PING, E2, E3, X]


def test_inject_after_a_duplicated_event_goes_after_the_first_copy() -> None:
    specs: list[Spec] = [
        ("duplicate", DuplicateConfig(nth=1)),
        ("inject", inject_cfg(after=1, event={"data": "x"})),
    ]
    assert run(specs, BODY).data == [E1, X, E1, PING, E2, E3, DONE]


def test_injected_events_pass_through_later_faults() -> None:
    specs: list[Spec] = [
        ("inject", inject_cfg(after=1, event={"data": "x"})),
        ("duplicate", DuplicateConfig(nth=1)),
    ]
    r = run(specs, BODY)
    # The injected event has ordinal 0, so selectors never pick it.
    assert r.data == [E1, E1, X, PING, E2, E3, DONE]
    assert r.faults[:3] == [(), ("duplicate",), ("inject",)]


# --------------------------------------------------------------------------- mutate

CHUNK = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}],"seq":1}\n\n'


def test_mutate_set_and_delete() -> None:
    spec = MutateConfig(set={"id": "other", "choices.0.delta.content": "Yo"}, delete=["seq"])
    r = run([("mutate", spec)], CHUNK + DONE)
    assert r.data == [
        b'data: {"id":"other","choices":[{"index":0,"delta":{"content":"Yo"}}]}\n\n',
        DONE,  # not JSON: unchanged
    ]
    assert r.faults == [("mutate",), ()]
    assert r.ordinals == [1, 2]
    assert r.applied == {"mutate": 1}


def test_mutate_set_creates_missing_keys_and_takes_any_value() -> None:
    spec = MutateConfig(set={"a.b.c": [1, {"x": None}], "seq": 7, "choices.-1.index": 3})
    r = run([("mutate", spec)], CHUNK)
    assert orjson.loads(r.data[0][len(b"data: ") :]) == {
        "id": "c1",
        "choices": [{"index": 3, "delta": {"content": "Hi"}}],
        "seq": 7,
        "a": {"b": {"c": [1, {"x": None}]}},
    }


def test_mutate_keeps_other_sse_lines_and_line_endings() -> None:
    body = b'event: delta\r\nid: 4\r\n: note\r\ndata: {\r\ndata: "n": 1}\r\nretry: 10\r\n\r\n'
    r = assert_chunking_independent([("mutate", MutateConfig(set={"n": 2}))], body)
    assert r.data == [b'event: delta\r\nid: 4\r\n: note\r\ndata: {"n":2}\r\nretry: 10\r\n\r\n']
    frame = r.sends[0].events[0].frame
    assert (frame.event, frame.id, frame.retry, frame.data) == ("delta", "4", 10, '{"n":2}')


def test_mutate_out_of_range_index_fails_soft() -> None:
    spec = MutateConfig(set={"choices.3.index": 1}, delete=["nothing"])
    r = run([("mutate", spec)], CHUNK)
    assert r.data == [CHUNK]
    assert r.skipped[0]["reason"] == (
        "choices.3.index: index 3 out of range (list of 1); nothing: no key 'nothing'"
    )
    # One path failing does not stop the others.
    spec = MutateConfig(set={"choices.3.index": 1, "seq": 2})
    assert run([("mutate", spec)], CHUNK).applied == {"mutate": 1}


def test_mutate_path_through_a_scalar_fails_soft() -> None:
    r = run([("mutate", MutateConfig(set={"id.x": 1}, delete=["choices.x"]))], CHUNK)
    assert r.data == [CHUNK]
    assert r.skipped[0]["reason"] == (
        "id.x: cannot go into str at 'x'; choices.x: 'x' is not a list index"
    )


def test_mutate_non_json_is_skipped() -> None:
    r = run([("mutate", MutateConfig(set={"a": 1}))], b"data: plain text\n\n" + DONE)
    assert r.data == [b"data: plain text\n\n", DONE]
    assert r.skipped[0]["reason"] == "the 2 selected event(s) had no JSON data"


def test_mutate_ndjson_keeps_the_terminator() -> None:
    r = run([("mutate", MutateConfig(nth=2, set={"n": "two"}))], NDJSON, fmt="ndjson")
    assert r.data == [b'{"n":1}\n', b'{"n":"two"}\n', b'{"n":3,"done":true}\n']
    crlf = run([("mutate", MutateConfig(set={"m": 0}))], b'{"n":1}\r\n{"n":2}', fmt="ndjson")
    assert crlf.data == [b'{"n":1,"m":0}\r\n', b'{"n":2,"m":0}']


def test_mutate_does_not_touch_the_shared_parsed_payload() -> None:
    r = run([("duplicate", DuplicateConfig()), ("mutate", MutateConfig(nth=1, delete=["n"]))], E1)
    assert r.data == [b"data: {}\n\n", b"data: {}\n\n"]
    assert json.loads(E1[6:]) == {"n": 1}


# --------------------------------------------------------------------------- corrupt

TEXT = 'data: {"text":"héllo wörld"}\n\n'.encode()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("truncate_json", b'data: {"text":"h\xc3\xa9\n\n'),  # 12 of 24 bytes
        ("invalid_json", 'data: {"text":"héllo wörld"\n\n'.encode()),
        ("invalid_utf8", b'data: {"text":"h\xc3\xa9\xffllo w\xc3\xb6rld"}\n\n'),
        ("empty_data", b"data:\n\n"),
    ],
)
def test_corrupt_modes(mode: str, expected: bytes) -> None:
    cfg = CorruptConfig.model_validate({"mode": mode, "nth": 1})
    r = assert_chunking_independent([("corrupt", cfg)], TEXT + DONE)
    assert r.data == [expected, DONE]
    assert r.faults == [("corrupt",), ()]
    assert r.ordinals == [1, 2]


def test_corrupt_truncate_backs_off_to_a_character_boundary() -> None:
    # 8 bytes of data; half is 4, inside the second "é" (bytes 3-4): cut back to 3.
    r = run([("corrupt", CorruptConfig(mode="truncate_json"))], 'data: "ééé"\n\n'.encode())
    assert r.data == ['data: "é\n\n'.encode()]
    r = run([("corrupt", CorruptConfig(mode="invalid_utf8"))], 'data: "ééé"\n\n'.encode())
    assert r.data == [b'data: "\xc3\xa9\xff\xc3\xa9\xc3\xa9"\n\n']


def test_corrupt_invalid_json_is_never_valid_json() -> None:
    samples = [b'{"a":{}}', b"[1,[2]]", b"42", b'"s"', b"true", b"{}  "]
    for payload in samples:
        r = run([("corrupt", CorruptConfig(mode="invalid_json"))], b"data: " + payload + b"\n\n")
        data = r.sends[0].events[0].frame.data
        assert data is not None
        with pytest.raises(json.JSONDecodeError):
            json.loads(data)
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], b"data: 42\n\n")
    assert r.data == [b"data: 42}\n\n"]


def test_corrupt_keeps_crlf_and_other_fields() -> None:
    body = b'event: x\r\nid: 1\r\ndata: {"a":1}\r\n\r\n'
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], body)
    assert r.data == [b'event: x\r\nid: 1\r\ndata: {"a":1\r\n\r\n']


def test_corrupt_ndjson() -> None:
    for mode, line in [
        ("empty_data", b"{}"),
        ("invalid_json", b'{"n":2'),
        ("truncate_json", b'{"n'),
        ("invalid_utf8", b'{"n\xff":2}'),
    ]:
        r = run([("corrupt", CorruptConfig(mode=mode, nth=2))], NDJSON, fmt="ndjson")  # type: ignore[arg-type]
        assert r.data[1] == line + b"\n", mode
        assert r.data[0] == b'{"n":1}\n'


def test_corrupt_an_unterminated_final_event_stays_unterminated() -> None:
    r = run([("corrupt", CorruptConfig(mode="empty_data", kind="terminal"))], E1 + b"data: [DONE]")
    assert r.data == [E1, b"data:"]
    assert r.sends[1].events[0].frame.complete is False


# --------------------------------------------------------------------------- oversize


def test_oversize_payload_is_exact() -> None:
    assert oversize_payload(5) == b"xxxxx"
    assert oversize_payload(15) == b"x" * 15
    assert oversize_payload(16) == b'{"oversize":"x"}'
    for n in (1, 15, 16, 17, 1000):
        assert len(oversize_payload(n)) == n


def test_oversize_after_an_event() -> None:
    r = run([("oversize", OversizeConfig(after=1, bytes=20))], BODY)
    big = b'data: {"oversize":"xxxxx"}\n\n'
    assert r.data == [E1, big, PING, E2, E3, DONE]
    assert r.ordinals == [1, 0, 0, 2, 3, 4]
    assert r.faults[1] == ("oversize",)
    assert r.applied == {"oversize": 1}


def test_oversize_after_0_goes_before_the_first_event() -> None:
    body = PING + E1.replace(b"\n", b"\r\n")
    r = run([("oversize", OversizeConfig(after=0, bytes=3))], body)
    assert r.data == [PING, b"data: xxx\r\n\r\n", E1.replace(b"\n", b"\r\n")]


def test_oversize_endless_line_withholds_the_rest() -> None:
    specs: list[Spec] = [("oversize", OversizeConfig(after=2, bytes=4, terminated=False))]
    r = assert_chunking_independent(specs, BODY)
    assert r.data == [E1, PING, E2, b"data: xxxx"]
    assert r.sends[-1].events[0].frame.complete is False
    fault = r.pipeline.faults[0]
    assert isinstance(fault, OversizeFault) and fault.withheld == 2


def test_oversize_endless_line_replacing_a_dropped_anchor() -> None:
    specs: list[Spec] = [
        ("drop", DropConfig(nth=2)),
        ("oversize", OversizeConfig(after=2, bytes=4, terminated=False)),
    ]
    r = run(specs, BODY)
    assert r.data == [E1, PING, b"data: xxxx"]
    assert r.pipeline.faults[1].withheld == 2  # type: ignore[attr-defined]


def test_oversize_ndjson() -> None:
    r = run([("oversize", OversizeConfig(after=3, bytes=17))], NDJSON, fmt="ndjson")
    assert r.data[-1] == b'{"oversize":"xx"}\n'
    r = run(
        [("oversize", OversizeConfig(after=1, bytes=2, terminated=False))], NDJSON, fmt="ndjson"
    )
    assert r.data == [b'{"n":1}\n', b"xx"]


def test_oversize_on_an_empty_body_after_0_and_never_reached() -> None:
    assert run([("oversize", OversizeConfig(after=0, bytes=2))], b"").data == [b"data: xx\n\n"]
    r = run([("oversize", OversizeConfig(after=5, bytes=2))], BODY)
    assert r.skipped[0]["reason"] == "after: 5 never reached: the stream had 4 events"


def test_oversize_large_is_exactly_that_long() -> None:
    r = run([("oversize", OversizeConfig(after=1, bytes=1 << 20))], E1)
    line = r.data[1]
    assert line.startswith(b"data: ") and line.endswith(b"\n\n")
    assert len(line) == len(b"data: ") + (1 << 20) + 2


# --------------------------------------------------------------------------- line_endings


@pytest.mark.parametrize(("style", "nl"), [("crlf", b"\r\n"), ("cr", b"\r"), ("lf", b"\n")])
def test_line_endings_reencode_every_line(style: str, nl: bytes) -> None:
    body = b"event: a\ndata: 1\r\ndata: 2\r\r\n: c\n\n"
    r = assert_chunking_independent([("line_endings", LineEndingsConfig(style=style))], body)  # type: ignore[arg-type]
    assert r.body == nl.join([b"event: a", b"data: 1", b"data: 2", b"", b": c", b"", b""])
    assert r.data[0] == nl.join([b"event: a", b"data: 1", b"data: 2", b""]) + nl
    assert r.sends[0].events[0].frame.newline == nl
    assert r.sends[0].events[0].frame.data == "1\n2"


def test_line_endings_crlf_fixture_to_lf() -> None:
    from tests.conftest import fixture_bytes

    body = fixture_bytes("gemini_2_5_flash_short.crlf.sse")
    r = run([("line_endings", LineEndingsConfig(style="lf"))], body)
    assert r.body == body.replace(b"\r\n", b"\n")
    assert r.applied == {"line_endings": len(r.sends)}


def test_line_endings_keeps_an_unterminated_last_line() -> None:
    r = run([("line_endings", LineEndingsConfig(style="crlf"))], E1 + b"data: [DONE]")
    assert r.data == [b'data: {"n":1}\r\n\r\n', b"data: [DONE]"]


def test_line_endings_already_in_style_is_skipped() -> None:
    r = run([("line_endings", LineEndingsConfig(style="lf"))], BODY)
    assert r.data == [E1, PING, E2, E3, DONE]
    assert r.skipped[0]["reason"] == "every line already ended in lf"


def test_line_endings_ndjson() -> None:
    r = run([("line_endings", LineEndingsConfig(style="crlf"))], NDJSON, fmt="ndjson")
    assert r.body == NDJSON.replace(b"\n", b"\r\n")
    # A lone CR inside an NDJSON line is data, not a line ending.
    r = run([("line_endings", LineEndingsConfig(style="lf"))], b'{"a":"\r"}\r\n', fmt="ndjson")
    assert r.data == [b'{"a":"\r"}\n']
    r = run([("line_endings", LineEndingsConfig(style="cr"))], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == (
        "style cr is not an NDJSON line ending; the body was left unchanged"
    )


# --------------------------------------------------------------------------- bom

BOM = b"\xef\xbb\xbf"


def test_bom_prepends_to_the_first_frame_only() -> None:
    r = assert_chunking_independent([("bom", BomConfig())], PING + E1)
    assert r.data == [BOM + PING, E1]
    assert r.faults == [("bom",), ()]
    assert r.applied == {"bom": 1}


def test_bom_is_doubled_when_the_body_has_one() -> None:
    r = run([("bom", BomConfig())], BOM + E1)
    assert r.data == [BOM + BOM + E1]
    assert r.ordinals == [1]


def test_bom_ndjson_and_empty_body() -> None:
    assert run([("bom", BomConfig())], NDJSON, fmt="ndjson").body == BOM + NDJSON
    r = run([("bom", BomConfig())], b"")
    assert r.data == []
    assert r.skipped[0]["reason"] == "the body was empty"


def test_bom_config_takes_no_parameters() -> None:
    assert BomConfig.model_validate({}) == BomConfig()


# --------------------------------------------------------------------------- comment

KEEPALIVE = b": keepalive\n\n"


def test_comment_after_every_event() -> None:
    r = run([("comment", CommentConfig())], BODY)
    assert r.data == [E1, KEEPALIVE, PING, E2, KEEPALIVE, E3, KEEPALIVE, DONE, KEEPALIVE]
    assert r.ordinals == [1, 0, 0, 2, 0, 3, 0, 4, 0]
    assert r.faults[1] == ("comment",)
    assert r.sends[1].events[0].kinds == frozenset()
    assert r.applied == {"comment": 4}


def test_comment_every_and_text_in_the_stream_line_ending() -> None:
    body = BODY.replace(b"\n", b"\r\n")
    r = run([("comment", CommentConfig(every=2, text="hi\nthere"))], body)
    c = b": hi\r\n: there\r\n\r\n"
    assert r.body == body.replace(b'"n":2}\r\n\r\n', b'"n":2}\r\n\r\n' + c) + c
    # The parsed view is the framer's: a comment's text is kept verbatim.
    assert r.sends[-1].events[0].frame.comments == (" hi", " there")


def test_comment_once_per_ordinal_after_a_duplicate() -> None:
    specs: list[Spec] = [("duplicate", DuplicateConfig(nth=1)), ("comment", CommentConfig(every=4))]
    assert run(specs, BODY).data == [E1, E1, PING, E2, E3, DONE, KEEPALIVE]
    # Copies come one by one: the comment follows the first; listed first, it follows all.
    specs = [("duplicate", DuplicateConfig(nth=1)), ("comment", CommentConfig(every=1))]
    assert run(specs, E1).data == [E1, KEEPALIVE, E1]
    specs = [("comment", CommentConfig(every=1)), ("duplicate", DuplicateConfig(nth=1))]
    assert run(specs, E1).data == [E1, E1, KEEPALIVE]


def test_comment_not_after_an_unterminated_event() -> None:
    r = run([("comment", CommentConfig())], E1 + b"data: [DONE]")
    assert r.data == [E1, KEEPALIVE, b"data: [DONE]"]


def test_comment_on_ndjson_is_skipped() -> None:
    r = run([("comment", CommentConfig())], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == "comments need SSE; NDJSON has no comment syntax"


# --------------------------------------------------------------------------- ids


def test_ids_number_events_without_one() -> None:
    body = E1 + PING + b"id: own\ndata: 2\n\n" + E3
    r = assert_chunking_independent([("ids", IdsConfig(start=5, retry=3000))], body)
    assert r.data == [
        b'id: 5\nretry: 3000\ndata: {"n":1}\n\n',
        PING,
        b"id: own\ndata: 2\n\n",
        b'id: 6\ndata: {"n":3}\n\n',
    ]
    assert r.faults == [("ids",), (), (), ("ids",)]
    frames = [s.events[0].frame for s in r.sends]
    assert [(f.id, f.retry) for f in frames] == [
        ("5", 3000),
        (None, None),
        ("own", None),
        ("6", None),
    ]
    assert r.applied == {"ids": 2}


def test_ids_default_start_crlf_and_bom() -> None:
    body = BOM + E1.replace(b"\n", b"\r\n") + b"retry: 1\r\ndata: 2\r\n\r\n"
    r = run([("ids", IdsConfig(retry=10))], body)
    assert r.data == [
        BOM + b'id: 0\r\nretry: 10\r\ndata: {"n":1}\r\n\r\n',
        b"id: 1\r\nretry: 1\r\ndata: 2\r\n\r\n",
    ]


def test_ids_retry_not_added_when_the_first_event_has_one() -> None:
    r = run([("ids", IdsConfig(retry=10))], b"id: a\nretry: 5\ndata: 1\n\n" + E1)
    assert r.data == [b"id: a\nretry: 5\ndata: 1\n\n", b'id: 0\ndata: {"n":1}\n\n']


def test_ids_skipped() -> None:
    r = run([("ids", IdsConfig())], NDJSON, fmt="ndjson")
    assert r.body == NDJSON
    assert r.skipped[0]["reason"] == "ids need SSE; NDJSON has no id field"
    r = run([("ids", IdsConfig())], b"id: 1\ndata: x\n\n")
    assert r.skipped[0]["reason"] == "no event lacked an id"


# --------------------------------------------------------------------------- together


def test_determinism_same_seed_same_writes() -> None:
    specs: list[Spec] = [
        ("drop", DropConfig(probability=0.5)),
        ("reorder", ReorderConfig(window=3, mode="shuffle")),
        ("duplicate", DuplicateConfig(probability=0.5, times=2)),
    ]
    body = b"".join(b"data: %d\n\n" % i for i in range(1, 41))
    first = run(specs, body, seed=42)
    again = run(specs, [body[i : i + 5] for i in range(0, len(body), 5)], seed=42)
    assert first.data == again.data and first.faults == again.faults
    assert run(specs, body, seed=43).data != first.data


def test_each_position_has_its_own_generator() -> None:
    body = b"".join(b"data: %d\n\n" % i for i in range(1, 41))
    alone = run([("drop", DropConfig(probability=0.5))], body)
    kept = set(alone.ordinals)
    # A fault added after it does not change what it draws.
    with_more = run(
        [("drop", DropConfig(probability=0.5)), ("duplicate", DuplicateConfig(probability=0.5))],
        body,
    )
    assert set(with_more.ordinals) == kept
    # The same config at another position draws differently.
    twice = run([("drop", DropConfig(probability=0.5))] * 2, body)
    second = twice.pipeline.faults[1]
    assert second.applied > 0
    assert set(twice.ordinals) < kept


def test_a_full_chain_on_a_real_capture() -> None:
    from tests.conftest import fixture_bytes

    body = fixture_bytes("openai_chat_text_usage.sse")
    specs: list[Spec] = [
        ("duplicate", DuplicateConfig(kind="delta", nth=3)),
        ("mutate", MutateConfig(kind="start", set={"id": "chatcmpl-other"})),
        ("inject", inject_cfg(after="terminal", event={"kind": "error"})),
        ("ids", IdsConfig(start=1)),
    ]
    r = assert_chunking_independent(specs, body[:2000], provider="openai-chat")
    assert r.applied["duplicate"] == 1 and r.applied["mutate"] == 1
    assert b'"id":"chatcmpl-other"' in r.data[0] and r.data[0].startswith(b"id: 1\n")
    r = run(specs, body, provider="openai-chat")
    assert r.data[-1].startswith(b"id: ") and b'"error"' in r.data[-1]
    assert r.sends[-1].faults == ("inject", "ids")
    assert r.applied == {"duplicate": 1, "mutate": 1, "inject": 1, "ids": len(r.sends)}


# --------------------------------------------------------------------------- helpers


def test_split_lines_round_trips() -> None:
    raw = b"a\r\nb\rc\n\nd"
    assert split_lines(raw) == [
        (b"a", b"\r\n"),
        (b"b", b"\r"),
        (b"c", b"\n"),
        (b"", b"\n"),
        (b"d", b""),
    ]
    assert b"".join(c + t for c, t in split_lines(raw)) == raw


def test_replace_data_spacing_and_hooks_directly() -> None:
    frame = Frame(raw=b"data:old\n\n", data="old")
    assert replace_data(frame, "sse", b" lead\nx").raw == b"data:  lead\ndata:x\n\n"
    fault = build_faults([("drop", DropConfig(nth=1))], 1, "sse", get_profile("generic"))[0]
    first, comment = ev(E1, 1), ev(PING, 0)
    fault.observe(first)
    assert fault.on_event(comment) == [comment]
    assert fault.on_event(first) == []
    assert fault.on_event_end() == []


def test_corrupt_keeps_the_wire_bytes_of_invalid_utf8_data() -> None:
    body = b'data: "\xff\xfeab"\n\n'
    r = run([("corrupt", CorruptConfig(mode="invalid_json"))], body)
    assert r.data == [b'data: "\xff\xfeab"}\n\n']
    r = run([("corrupt", CorruptConfig(mode="truncate_json"))], b'{"\xff":1}\n', fmt="ndjson")
    assert r.data == [b'{"\xff\n']


def test_parse_block_views() -> None:
    frame = parse_block(
        b"\xef\xbb\xbf: c\r\nevent: e\r\nretry: 5\r\ndata: a\r\ndata\r\n\r\n", "sse"
    )
    assert (frame.data, frame.event, frame.retry, frame.comments) == ("a\n", "e", 5, (" c",))
    assert (frame.newline, frame.complete) == (b"\r\n", True)
    assert parse_block(b"data: x", "sse").complete is False
    assert parse_block(b": only\n\n", "sse").is_event is False
    assert parse_block(b"  \n", "ndjson").data is None
    assert parse_block(b'{"a":1}\r\n', "ndjson").data == '{"a":1}'


@pytest.mark.parametrize(
    "raw",
    [
        b"data: x\n\n",
        b"event: e\r\ndata: {}\r\n\r\n",
        b": c\rid: 7\rretry: 10\rdata\rdata:  two\r\r",
        b"\xef\xbb\xbfdata: bom\n\n",
        b"id: a\x00b\nretry: 1x\nfoo: bar\ndata: \xff\n\n",
        b"data: unterminated",
    ],
)
def test_parse_block_is_the_framers_view(raw: bytes) -> None:
    """One SSE parser: bytes a fault builds parse exactly as the framer cuts them."""
    from chaosproxy.core.framing.sse import SseFramer

    framer = SseFramer()
    frames = framer.feed(raw) + framer.eof()
    assert frames == [parse_block(raw, "sse")]


def test_every_yaml_example_in_the_reference_is_valid() -> None:
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "faults-event.md").read_text()
    seen = set()
    for block in re.findall(r"```yaml\n(.*?)```", doc, re.S):
        for item in yaml.safe_load(block)["faults"]:
            [(name, params)] = item.items()
            registry()[name].Config.model_validate(params or {})
            seen.add(name)
    assert seen == set(EVENT_FAULTS)
