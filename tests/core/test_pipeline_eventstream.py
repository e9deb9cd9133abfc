"""The pipeline over an AWS event stream (Bedrock): each message one write with its
kinds, and several event faults together moving whole messages whatever the chunking
(each fault's own event stream cases: tests/core/faults/test_<fault>.py)."""

from __future__ import annotations

from chaosproxy.core.faults.drop import DropConfig
from chaosproxy.core.faults.duplicate import DuplicateConfig
from chaosproxy.core.faults.reorder import ReorderConfig
from tests.support import bedrock_stream as bs
from tests.support.bedrock_stream import BODY, D1, D2, D3, META, START, STOP, STOP_BLOCK, Spec


def test_no_fault_every_message_is_one_write_with_its_kinds() -> None:
    sends = bs.run([])
    assert [s.data for s in sends] == [START, D1, D2, D3, STOP_BLOCK, STOP, META]
    assert [sorted(e.kinds) for s in sends for e in s.events] == [
        ["start"],
        ["delta"],
        ["delta"],
        ["delta"],
        ["other"],
        ["other"],
        ["terminal", "usage"],
    ]


def test_drop_duplicate_and_reorder_move_whole_messages_at_any_chunking() -> None:
    specs: list[Spec] = [
        ("drop", DropConfig(kind="delta", nth=2)),
        ("duplicate", DuplicateConfig(kind="terminal")),
        ("reorder", ReorderConfig(kind="delta", window=2)),
    ]
    whole = [s.data for s in bs.run(specs)]
    assert whole == [START, D3, D1, STOP_BLOCK, STOP, META, META]
    for k in range(1, len(BODY)):
        assert [s.data for s in bs.run(specs, [BODY[:k], BODY[k:]])] == whole, k
    assert bs.names(b"".join(whole)) == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "metadata",
    ]
