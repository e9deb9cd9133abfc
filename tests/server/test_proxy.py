"""chaosproxy/server/proxy.py: request ids (the handler itself runs in every e2e test)."""

from __future__ import annotations

import os
import re

from chaosproxy.server import proxy

ID = re.compile(r"r-([0-9a-f]{16})-(\d+)")


def test_request_ids_carry_a_64_bit_tag_and_count_from_one_in_order() -> None:
    first, second = proxy.next_request_id(), proxy.next_request_id()
    a, b = ID.fullmatch(first), ID.fullmatch(second)
    assert a is not None and b is not None, (first, second)
    assert a.group(1) == b.group(1)
    assert int(b.group(2)) == int(a.group(2)) + 1


def test_a_forked_process_draws_a_tag_of_its_own() -> None:
    """A fork server's children (the replicas of a test, a supervisor's forks) are
    processes of their own: the same tag would give two of them the same ids."""
    parent = ID.fullmatch(proxy.next_request_id())
    assert parent is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent, and out at once
        os.write(write, proxy.next_request_id().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = ID.fullmatch(pipe.read().decode())
    os.waitpid(pid, 0)
    assert child is not None
    assert child.group(1) != parent.group(1)
    assert child.group(2) == "1"
