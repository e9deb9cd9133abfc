"""Which worker keeps a stream (chaosproxy/workers/handover.py): the owner read from a
stream token's prefix, none for the worker's own, an unknown worker's or a token of one
process."""

from __future__ import annotations

import socket

from chaosproxy.workers.handover import WorkerHandover, token_prefix


def test_which_worker_keeps_a_stream_is_in_its_token() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handover = WorkerHandover(0, [None, a])
    assert token_prefix(1) == "w1_"
    assert handover.owner(b"w1_AbCd-_xyz.4") == 1
    assert handover.owner(b"w0_AbCd.4") is None  # its own
    assert handover.owner(b"w7_AbCd.4") is None  # no such worker
    assert handover.owner(b"AbCd.4") is None  # one process's token, or upstream ids
    assert handover.owner(b"") is None
    a.close()
    b.close()
