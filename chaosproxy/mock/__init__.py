"""The built-in mock LLM upstream (docs/mock.md).

``create_mock_app()`` builds the aiohttp application; ``run_mock()`` serves it until
cancelled. See docs/mock.md for the endpoints and knobs.
"""

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
