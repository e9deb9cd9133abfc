"""The built-in mock LLM upstream (docs/mock.md).

``create_mock_app()`` builds the aiohttp application; ``run_mock()`` serves it until
cancelled. See docs/mock.md for the endpoints and knobs.

The names below are loaded when first used, so that importing one module of the mock
does not load aiohttp and the whole mock with it. Its defaults (answer length and pace,
the address ``chaosproxy mock`` listens on) are ``chaosproxy/core/mock_defaults.py``'s,
which the configuration reads too (the server imports nothing of the mock).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaosproxy.mock.app import (
        INTERVAL_HEADER,
        MOCK_FIXTURES,
        MOCK_KNOBS,
        MOCK_REQUESTS,
        TOKENS_HEADER,
        create_mock_app,
        run_mock,
    )
    from chaosproxy.mock.common import Knobs
    from chaosproxy.mock.fixtures import FIXTURE_HEADER, SCENARIO_HEADER, MockFixtures

#: Each public name → the module that defines it.
_WHERE = {
    "INTERVAL_HEADER": "app",
    "MOCK_FIXTURES": "app",
    "MOCK_KNOBS": "app",
    "MOCK_REQUESTS": "app",
    "TOKENS_HEADER": "app",
    "create_mock_app": "app",
    "run_mock": "app",
    "Knobs": "common",
    "FIXTURE_HEADER": "fixtures",
    "SCENARIO_HEADER": "fixtures",
    "MockFixtures": "fixtures",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "FIXTURE_HEADER",
    "INTERVAL_HEADER",
    "MOCK_FIXTURES",
    "MOCK_KNOBS",
    "MOCK_REQUESTS",
    "SCENARIO_HEADER",
    "TOKENS_HEADER",
    "Knobs",
    "MockFixtures",
    "create_mock_app",
    "run_mock",
]
