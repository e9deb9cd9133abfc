"""The README's code blocks, read as the README shows them."""

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
