"""TEMPORARY, for tests/core/test_faults_*.py only (engineer FU moves them to
tests/core/faults/, importing from tests/support/): delete at that merge. The module
lives in tests/support/content_streams.py; tests/test_test_layout.py allows no other import."""

from tests.support.content_streams import FORMATS, FRAGMENTS, PATHS, PROVIDERS, parse, render

__all__ = ["FORMATS", "FRAGMENTS", "PATHS", "PROVIDERS", "parse", "render"]
