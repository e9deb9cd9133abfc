"""What every fault shares (chaosproxy/core/faults/base.py and the registry): configs
strict and frozen, one generator per fault and position, the stages, durations, and the
examples of the fault references valid."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from chaosproxy.core.actions import Send
from chaosproxy.core.faults import registry
from chaosproxy.core.faults.bom import BomConfig
from chaosproxy.core.faults.cut import CutConfig
from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.headers import HeadersConfig
from chaosproxy.core.faults.ids import IdsConfig
from chaosproxy.core.faults.inject import InjectConfig
from chaosproxy.core.faults.mutate import MutateConfig
from chaosproxy.core.faults.oversize import OversizeConfig
from chaosproxy.core.faults.reorder import ReorderConfig
from chaosproxy.core.faults.status import StatusConfig
from chaosproxy.core.frames import Format
from chaosproxy.core.pipeline import Pipeline
from tests.support.fault_events import Spec, assert_chunking_independent, inject_cfg, run
from tests.support.fault_http import GENERIC, UPSTREAM_HEADERS, fault
from tests.support.repo import REPO

#: The event faults, as their files declare them (a new one is in this list unasked).
EVENT_FAULTS = sorted(name for name, cls in registry().items() if cls.stage == "event")


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
        assert cls.name == name and cls.stage in ("http", "event", "transport", "websocket")


def test_every_event_fault_needs_framing() -> None:
    assert registry()["drop"].needs_framing(DropConfig())
    assert registry()["bom"].needs_framing(BomConfig())


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
    from tests.support.repo import fixture_bytes

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


def test_every_yaml_example_in_the_reference_is_valid() -> None:
    import re

    import yaml

    doc = (REPO / "docs" / "faults-event.md").read_text()
    seen = set()
    for block in re.findall(r"```yaml\n(.*?)```", doc, re.S):
        for item in yaml.safe_load(block)["faults"]:
            [(name, params)] = item.items()
            registry()[name].Config.model_validate(params or {})
            seen.add(name)
    assert seen == set(EVENT_FAULTS)


@pytest.mark.parametrize("fmt", ["sse", "ndjson", "raw"])
def test_http_faults_take_no_part_in_the_body_but_are_reported(fmt: Format) -> None:
    status = fault("status", StatusConfig(code=500))
    headers = fault("headers", HeadersConfig(set={"X-Chaos": "1"}))
    assert (status.stage, headers.stage) == ("http", "http")
    assert not status.needs_framing(status.config)
    assert not headers.needs_framing(headers.config)
    headers.response_headers(200, dict(UPSTREAM_HEADERS))
    p = Pipeline([status, headers], fmt, GENERIC)
    body = b"data: x\n\n" if fmt == "sse" else b'{"a":1}\n'
    assert [(type(a), getattr(a, "data", None)) for a in p.feed(body, 0.0)] == [(Send, body)]
    assert p.end(0.0) == []
    assert p.summary() == (
        {"headers": 1},
        [{"fault": "status", "position": 0, "reason": "the request never reached the upstream"}],
    )


def test_transport_only_faults_do_nothing_before_upstream() -> None:
    f = fault("cut", CutConfig(after=1))
    assert f.before_upstream() == []
    assert f.response_headers(200, dict(UPSTREAM_HEADERS)) == UPSTREAM_HEADERS


def test_http_fault_configs_are_frozen() -> None:
    cfg = StatusConfig(code=500)
    with pytest.raises(ValidationError):
        cfg.code = 501
