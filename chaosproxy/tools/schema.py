"""JSON Schemas for the frame log's lines and for scenario files, generated.

Both are shipped in the package (``chaosproxy/schemas/*.schema.json``, read with
:func:`shipped`) and printed by ``chaosproxy schema log|scenario``; tests/tools/test_schema.py
checks that the shipped files are what this module generates now, so a change to a
line's record (:mod:`chaosproxy.core.records`), to the scenario model
(:mod:`chaosproxy.scenario.model`) or to a fault's ``Config`` regenerates them:
``chaosproxy schema --write``.

- ``log``: one line of the frame log, any kind, told apart by ``event``
  (docs/observability.md). Every object is closed (``additionalProperties: false``):
  a line with a key the records do not name is invalid, so the test suite's check
  (tests/logcheck.py) finds a field added without its record.
- ``scenario``: one scenario file (docs/scenarios.md), its faults discovered from
  :mod:`chaosproxy.core.faults`. It says what JSON Schema can (keys, types, ranges,
  the fault names and their parameters); what only the loader knows (a fault that
  needs framing under ``format: raw``, a regular expression's syntax) stays the
  loader's: ``chaosproxy validate`` is the full check.

Pydantic generates both, so this module is never compiled (it is not in
:data:`chaosproxy._build.COMPILED`).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

SchemaName = Literal["log", "scenario"]
SCHEMA_NAMES: tuple[SchemaName, ...] = get_args(SchemaName)
DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: ``ts``: ISO 8601 UTC with milliseconds (``2026-12-01T15:36:00.123Z``).
TS_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"


def file_name(name: SchemaName) -> str:
    return f"{name}.schema.json"


def log_schema() -> dict[str, Any]:
    """The JSON Schema of one frame-log line."""
    # (Imported here: ``chaosproxy serve`` builds the ``schema`` subcommand's parser,
    # and pydantic's schema generation is no part of starting a proxy.)
    from pydantic import Field, TypeAdapter

    from chaosproxy.core import records

    line = Annotated[records.LogLine, Field(discriminator="event")]
    schema = TypeAdapter(line).json_schema(ref_template="#/$defs/{model}")
    for definition in schema["$defs"].values():
        if definition.get("type") == "object":
            definition["additionalProperties"] = False
            ts = definition.get("properties", {}).get("ts")
            if ts is not None:
                ts["pattern"] = TS_PATTERN
    return {
        "$schema": DIALECT,
        "title": "chaosproxy frame-log line",
        "description": (
            "One line of chaosproxy's frame log (--log, --trace-dir): a JSON object whose "
            "'event' says its kind. See docs/observability.md."
        ),
        **schema,
    }


def _closed(definition: dict[str, Any]) -> dict[str, Any]:
    """``definition`` with no key but its own (pydantic's ``extra="forbid"`` says so
    already for the models; a fault's one-key mapping needs it said)."""
    return {**definition, "additionalProperties": False}


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (YAML read as JSON)."""
    from pydantic.json_schema import models_json_schema

    from chaosproxy.core.faults import registry
    from chaosproxy.scenario.model import Scenario

    faults = registry()
    models: list[tuple[Any, Literal["validation"]]] = [(Scenario, "validation")]
    models += [(faults[name].Config, "validation") for name in sorted(faults)]
    refs, schema = models_json_schema(models, ref_template="#/$defs/{model}")
    defs: dict[str, Any] = schema["$defs"]
    top = defs.pop(refs[(Scenario, "validation")]["$ref"].rsplit("/", 1)[-1])
    properties = dict(top["properties"])
    del properties["source"]  # where a scenario came from: no file may say it
    # name defaults to the file's stem; description may be left null.
    properties["description"] = {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "default": "",
        "title": "Description",
    }
    # A file gives its requests as a list (the model keeps a set).
    properties["requests"] = {
        "anyOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
            {"type": "null"},
        ],
        "default": None,
        "title": "Requests",
        "description": "Apply only to these 1-based ordinals of the requests that chose it.",
    }
    items: list[dict[str, Any]] = [{"enum": sorted(faults)}]  # a bare name: no parameters
    for name in sorted(faults):
        config = refs[(faults[name].Config, "validation")]
        items.append(
            {
                "type": "object",
                "properties": {name: {"anyOf": [config, {"type": "null"}]}},
                "required": [name],
                "additionalProperties": False,
            }
        )
    properties["faults"] = {
        "type": "array",
        "title": "Faults",
        "description": "Applied in order; each a fault name or a one-key mapping {name: params}.",
        "items": {"anyOf": items},
    }
    return {
        "$schema": DIALECT,
        "title": "chaosproxy scenario",
        "description": (
            "One chaosproxy scenario file (YAML). See docs/scenarios.md; "
            "`chaosproxy validate FILE` is the full check."
        ),
        "type": "object",
        "properties": properties,
        "required": ["faults"],
        "additionalProperties": False,
        "$defs": defs,
    }


def generate(name: SchemaName) -> dict[str, Any]:
    """The schema ``name`` as this code generates it now."""
    return log_schema() if name == "log" else scenario_schema()


def render(schema: dict[str, Any]) -> str:
    """The text of a schema file: stable (sorted keys), indented, a final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def shipped_path(name: SchemaName) -> Path:
    """Where the package keeps schema ``name`` (a file of an installed package too)."""
    return Path(str(resources.files("chaosproxy") / "schemas" / file_name(name)))


def shipped(name: SchemaName) -> dict[str, Any]:
    """The shipped schema ``name``."""
    loaded: dict[str, Any] = json.loads(shipped_path(name).read_text(encoding="utf-8"))
    return loaded


def write(names: tuple[SchemaName, ...] = SCHEMA_NAMES) -> list[Path]:
    """Regenerate the shipped files (in a source checkout); the paths written."""
    written = []
    for name in names:
        path = shipped_path(name)
        path.parent.mkdir(exist_ok=True)
        path.write_text(render(generate(name)), encoding="utf-8")
        written.append(path)
    return written


def add_parser(sub: Any) -> None:
    """The ``schema`` subcommand (cli/main.py calls this)."""
    parser = sub.add_parser(
        "schema",
        help="print the JSON Schema of the frame log's lines or of scenario files",
        description="Print the JSON Schema of one frame-log line (log) or of a scenario file "
        "(scenario), as generated from this version's records and models; the package ships "
        "the same files (--path prints where). --write regenerates the shipped files "
        "(in a source checkout).",
    )
    parser.add_argument("name", nargs="?", choices=SCHEMA_NAMES, help="which schema")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--path", action="store_true", help="print the shipped file's path")
    how.add_argument("--write", action="store_true", help="regenerate the shipped files")


def command(args: Any) -> int:
    """``chaosproxy schema [log|scenario] [--path|--write]``."""
    if args.write:
        names = SCHEMA_NAMES if args.name is None else (args.name,)
        for path in write(names):
            print(path)
        return 0
    if args.name is None:
        print("chaosproxy: error: schema: name one: log or scenario", file=sys.stderr)
        return 2
    if args.path:
        print(shipped_path(args.name))
        return 0
    sys.stdout.write(render(generate(args.name)))
    return 0


__all__ = [
    "SCHEMA_NAMES",
    "SchemaName",
    "add_parser",
    "command",
    "generate",
    "log_schema",
    "render",
    "scenario_schema",
    "shipped",
    "shipped_path",
    "write",
]
