"""chaosproxy/server/proxy.py: request ids (the handler itself runs in every e2e test)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from chaosproxy.server import proxy

#: A request id (a test of the workers may have set this process's tag: any word).
ID = re.compile(r"r-(\w+)-(\d+)")


def test_request_ids_carry_a_64_bit_tag_and_count_from_one_in_order() -> None:
    """As a process that just imported the module makes them."""
    made = subprocess.run(
        [sys.executable, "-c", SHOW_TWO_IDS], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(made) == 2
    a, b = (re.fullmatch(r"r-([0-9a-f]{16})-(\d+)", i) for i in made)
    assert a is not None and b is not None, made
    assert a.group(1) == b.group(1)
    assert (a.group(2), b.group(2)) == ("1", "2")


SHOW_TWO_IDS = "from chaosproxy.server.proxy import next_request_id as n; print(n()); print(n())"


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
