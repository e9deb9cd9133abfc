"""How many examples a property test draws (docs/testing.md)."""

from __future__ import annotations

import os

#: The property tests' examples: ``max_examples=examples(N)`` draws N of them with
#: ``CHAOSPROXY_HYPOTHESIS=thorough`` (the compiled run of .ci/run sets it) and a quarter
#: (at least 10) by default, each run new ones (docs/testing.md).
THOROUGH = os.environ.get("CHAOSPROXY_HYPOTHESIS", "") == "thorough"


def examples(n: int) -> int:
    """How many examples a property test that asks for ``n`` draws in this run."""
    return n if THOROUGH else max(10, n // 4)
