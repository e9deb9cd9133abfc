"""The ``bom`` fault (docs/faults-event.md, ``bom``): a real Pipeline (framer, profile,
faults) over a small literal body: the exact bytes of every write, the upstream ordinal
of the event it carries and the faults that shaped it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaosproxy.core.faults.base import FaultConfig
from chaosproxy.core.faults.bom import BomConfig
from tests.support.fault_events import BOM, E1, NDJSON, PING, assert_chunking_independent, run


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (BomConfig, {"at": 1}),
    ],
)
def test_bad_config_is_a_validation_error(
    config: type[FaultConfig], values: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        config.model_validate(values)


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
