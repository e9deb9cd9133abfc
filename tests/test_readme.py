"""The README's examples run as written."""

from __future__ import annotations

from tests.support.markdown import python_block


def test_the_in_python_tests_example_runs() -> None:
    code = python_block("## In Python tests")
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["request_id"]
    assert namespace["received"]  # the chunks the SDK took for a whole answer
