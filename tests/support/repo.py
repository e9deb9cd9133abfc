"""Where the suite finds the repository, the scenario library and the recorded provider
captures."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The built-in scenario library: its one home, at the top of the repository (setup.py
#: builds it into the package as chaosproxy/scenarios/).
LIBRARY = REPO / "scenarios"
#: The recorded provider captures (see PROVENANCE.md there): part of the repo, so a
#: missing one is an error, never a skip. Every test reads them from here.
FIXTURES = REPO / "tests" / "fixtures" / "providers"


def fixture_bytes(name: str) -> bytes:
    """One capture's bytes, exactly as recorded (a missing file raises)."""
    return (FIXTURES / name).read_bytes()


def fixture_paths(*suffixes: str) -> list[Path]:
    """The captures whose names end with one of ``suffixes``, sorted; at least one, so a
    parametrization over them never silently collects nothing."""
    paths = sorted(p for p in FIXTURES.iterdir() if p.name.endswith(suffixes))
    if not paths:
        raise FileNotFoundError(f"no provider capture ending in {suffixes} in {FIXTURES}")
    return paths
