"""Scenarios: the Scenario value, loading it from YAML, and problems located to lines.

A package so that the value (``model``), the file handling (``loader``) and the wording
of problems (``errors``) can each be read alone; import from here.
"""

from chaosproxy.core.seeds import MAX_SEED
from chaosproxy.scenario.errors import Problem, ScenarioError
from chaosproxy.scenario.fixtures import Fixture
from chaosproxy.scenario.loader import (
    MAX_FAULTS,
    MAX_FILE_BYTES,
    check_paths,
    library_root,
    load_fixture_files,
    load_library,
    load_scenario_file,
    load_scenarios,
    parse_fixtures,
    parse_scenario,
    validate_paths,
    with_library,
)
from chaosproxy.scenario.model import (
    FORMATS,
    NAME_PATTERN,
    PASSTHROUGH,
    MatchRule,
    Scenario,
    cross_tenant_warnings,
    header_values,
)

__all__ = [
    "FORMATS",
    "MAX_FAULTS",
    "MAX_FILE_BYTES",
    "MAX_SEED",
    "NAME_PATTERN",
    "PASSTHROUGH",
    "Fixture",
    "MatchRule",
    "Problem",
    "Scenario",
    "ScenarioError",
    "check_paths",
    "cross_tenant_warnings",
    "header_values",
    "library_root",
    "load_fixture_files",
    "load_library",
    "load_scenario_file",
    "load_scenarios",
    "parse_fixtures",
    "parse_scenario",
    "validate_paths",
    "with_library",
]
