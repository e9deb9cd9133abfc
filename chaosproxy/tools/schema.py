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
  (tests/support/logcheck.py) finds a field added without its record.
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
    """The JSON Schema of a scenario file (YAML read as JSON).

    As strict as ``chaosproxy validate`` wherever JSON Schema can say it (docs/scenarios.md,
    "The JSON Schema"): the names of providers and event kinds, the name rule and the
    reserved ``none``, the alternatives a fault's parameters are (``one_of``), bare
    names only for faults that need no parameter, the number of faults, and the faults
    that ``format: raw`` or a ``provider:`` rule out. Each fault item is told apart by
    its key, so that an editor's (or ``check-jsonschema``'s) best error names the bad
    parameter, not the list of fault names."""
    from pydantic.json_schema import models_json_schema

    from chaosproxy.core.faults import registry
    from chaosproxy.core.faults.base import FaultConfig, SelectorConfig
    from chaosproxy.core.faults.splice import SpliceConfig
    from chaosproxy.core.providers import KINDS, PROVIDER_NAMES
    from chaosproxy.scenario.loader import MAX_FAULTS
    from chaosproxy.scenario.model import NAME_PATTERN, NAME_RULE, PASSTHROUGH, Scenario

    faults = registry()
    models: list[tuple[Any, Literal["validation"]]] = [(Scenario, "validation")]
    models += [(faults[name].Config, "validation") for name in sorted(faults)]
    refs, schema = models_json_schema(models, ref_template="#/$defs/{model}")
    defs: dict[str, Any] = schema["$defs"]
    top = defs.pop(refs[(Scenario, "validation")]["$ref"].rsplit("/", 1)[-1])
    properties = dict(top["properties"])
    del properties["source"]  # where a scenario came from: no file may say it
    properties["name"] = {
        "type": "string",
        "pattern": f"^{NAME_PATTERN}$",
        "not": {"const": PASSTHROUGH},
        "title": "Name",
        "description": f"{NAME_RULE}; not {PASSTHROUGH!r} (it selects no scenario). "
        "Default: the file's name without .yaml.",
    }
    properties["provider"] = {
        "enum": ["auto", *PROVIDER_NAMES],
        "default": "auto",
        "title": "Provider",
    }
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
    for name in sorted(faults):
        config = faults[name].Config
        definition = defs[refs[(config, "validation")]["$ref"].rsplit("/", 1)[-1]]
        if issubclass(config, SelectorConfig | SpliceConfig):
            _only(definition["properties"]["kind"], list(KINDS))
        _alternatives(definition, config)
    inject = defs.get("InjectedEvent")
    if inject is not None:  # (its own validator: one payload)
        _alternatives(inject, type("_", (), {"one_of": ("data", "raw", "kind"), "some_of": ()}))
    bare = sorted(n for n in faults if _takes_nothing(faults[n].Config))
    by_key = {
        name: _or_null(refs[(faults[name].Config, "validation")])
        if name in bare
        else refs[(faults[name].Config, "validation")]
        for name in sorted(faults)
    }
    for definition in defs.values():
        _nulls_as_conditions(definition)
    properties["faults"] = {
        "type": "array",
        "title": "Faults",
        "description": "Applied in order; each a fault name or a one-key mapping {name: params}.",
        "maxItems": MAX_FAULTS,
        "items": {
            "if": {"type": "string"},
            "then": {"enum": bare},
            "else": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": 1,
                "propertyNames": {"enum": sorted(faults)},
                "properties": by_key,
            },
        },
    }
    ruled_out: list[dict[str, Any]] = []
    framed = sorted(n for n in faults if faults[n].needs_framing(FaultConfig.model_construct()))
    ruled_out.append(_unless("format", "raw", framed))
    for provider in PROVIDER_NAMES:
        cannot = sorted(
            n
            for n in faults
            if faults[n].provider_problem(FaultConfig.model_construct(), provider) is not None
        )
        if cannot:
            ruled_out.append(_unless("provider", provider, cannot))
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
        "allOf": ruled_out,
        "$defs": defs,
    }


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or null: said as a condition, not an ``anyOf``, so that a bad value's
    best error is ``schema``'s (``size: 0 is less than the minimum of 1``), not "is not
    of type 'null'"."""
    return {"if": {"type": "null"}, "else": schema}


def _nulls_as_conditions(node: Any) -> None:
    """Every ``anyOf: [X, {type: null}]`` pydantic writes for an optional parameter,
    under ``node``, said as :func:`_or_null` does."""
    if isinstance(node, dict):
        alternatives = node.get("anyOf")
        if isinstance(alternatives, list) and {"type": "null"} in alternatives:
            rest = [a for a in alternatives if a != {"type": "null"}]
            del node["anyOf"]
            node.update(_or_null(rest[0] if len(rest) == 1 else _one_or_list(rest)))
        for value in node.values():
            _nulls_as_conditions(value)
    elif isinstance(node, list):
        for value in node:
            _nulls_as_conditions(value)


def _one_or_list(alternatives: list[Any]) -> dict[str, Any]:
    """``anyOf`` a value or a list of them (``nth: 3`` or ``nth: [3, 5]``) said as a
    condition on the type, so that a bad value's error is about it, not "is not of type
    'array'"."""
    lists = [a for a in alternatives if isinstance(a, dict) and a.get("type") == "array"]
    if len(alternatives) == 2 and len(lists) == 1:
        (one,) = [a for a in alternatives if a is not lists[0]]
        return {"if": {"type": "array"}, "then": lists[0], "else": one}
    return {"anyOf": alternatives}


def _only(node: Any, values: list[str]) -> None:
    """Every string ``node`` admits (itself, in an ``anyOf``, in an array) one of
    ``values``."""
    if isinstance(node, dict):
        if node.get("type") == "string" and "enum" not in node and "const" not in node:
            node["enum"] = values
        for key in ("anyOf", "items", "then", "else"):
            inner = node.get(key)
            for child in inner if isinstance(inner, list) else [inner]:
                _only(child, values)


def _alternatives(definition: dict[str, Any], config: Any) -> None:
    """A config's ``one_of`` (exactly one given, not null) and ``some_of`` (at least
    one), as the schema says them."""

    def given(name: str) -> dict[str, Any]:
        return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}

    if config.one_of:
        definition["oneOf"] = [given(n) for n in config.one_of]
    if config.some_of:
        definition["anyOf"] = [given(n) for n in config.some_of]


def _takes_nothing(config: Any) -> bool:
    """Whether a fault may be named bare (its config valid with no parameter)."""
    from pydantic import ValidationError

    try:
        config.model_validate({})
    except ValidationError:
        return False
    return True


def _unless(key: str, value: str, names: list[str]) -> dict[str, Any]:
    """``key: value`` rules out the faults ``names`` (bare or with parameters)."""
    return {
        "if": {"properties": {key: {"const": value}}, "required": [key]},
        "then": {
            "properties": {
                "faults": {
                    "items": {
                        "not": {
                            "anyOf": [
                                {"enum": names},
                                {"type": "object", "propertyNames": {"enum": names}},
                            ]
                        }
                    }
                }
            }
        },
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
