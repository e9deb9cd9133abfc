"""TEMPORARY, for tests/core/test_faults_*.py only (engineer FU moves them to
tests/core/faults/, importing from tests/support/): delete at that merge. The module
lives in tests/support/scripted_upstream.py; tests/test_test_layout.py allows no other import."""

from tests.support.scripted_upstream import Script, ScriptedUpstream, until

__all__ = ["Script", "ScriptedUpstream", "until"]
