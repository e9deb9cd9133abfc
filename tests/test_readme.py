"""The README's examples run as written."""

from __future__ import annotations

import re

from tests.support.repo import REPO


def python_block(heading: str) -> str:
    """The first ```python block after the README's ``heading``."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(f"\n{heading}\n") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python block under {heading!r}"
    return match.group(1)


def test_the_in_python_tests_example_runs() -> None:
    code = python_block("## In Python tests")
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["request_id"]
    assert namespace["received"]  # the chunks the SDK took for a whole answer
