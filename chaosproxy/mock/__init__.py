"""The built-in mock LLM upstream (docs/mock.md).

``create_mock_app()`` builds the aiohttp application; ``run_mock()`` serves it until
cancelled. See docs/mock.md for the endpoints and knobs.
"""

from chaosproxy.mock.app import (
    INTERVAL_HEADER,
    MOCK_KNOBS,
    MOCK_REQUESTS,
    TOKENS_HEADER,
    create_mock_app,
    run_mock,
)
from chaosproxy.mock.common import Knobs

__all__ = [
    "INTERVAL_HEADER",
    "MOCK_KNOBS",
    "MOCK_REQUESTS",
    "TOKENS_HEADER",
    "Knobs",
    "create_mock_app",
    "run_mock",
]
