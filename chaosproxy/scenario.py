"""Scenario files: loading, validation with located errors, and the Scenario value.

A scenario file is one YAML mapping (DESIGN.md section 4). It is parsed with PyYAML's
``SafeLoader`` (``yaml.safe_load`` semantics: no custom tags), but composed to nodes
first so that every problem can be reported with the line of the key or value at
fault, all at once, one per line::

    scenarios/dup.yaml:7: faults[1].rechunk.size: must be >= 1

Fault parameters are validated by each fault's own ``Config`` model, found through
:func:`chaosproxy.core.faults.registry` at call time; pydantic's errors are mapped back
to YAML lines and short phrases here.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from chaosproxy.core import faults as fault_registry
from chaosproxy.core.faults import FaultConfig

#: Files larger than this are refused before parsing.
MAX_FILE_BYTES = 1024 * 1024
#: A document whose aliases expand to more nodes than this is refused (alias bomb).
MAX_EXPANDED_NODES = 100_000
#: Deeper nesting is refused (PyYAML composes recursively; nothing legitimate nests so).
MAX_DEPTH = 64
#: Largest accepted seed (fits a signed 64-bit integer, so every JSON encoder takes it).
MAX_SEED = 2**63 - 1
#: Scenario names: usable as-is in a URL path segment and an HTTP header value.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
FORMATS = ("auto", "sse", "ndjson", "raw")
#: The scenario name that selects no scenario (``X-Chaos-Scenario: none``).
PASSTHROUGH = "none"

_NAME_RE = re.compile(NAME_PATTERN)
_MERGE_TAG = "tag:yaml.org,2002:merge"

# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in one file; ``line`` is 1-based, 0 when it concerns the whole file."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ScenarioError(Exception):
    """One or more problems; ``str()`` gives one ``FILE:LINE: message`` per line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive), for a plain dict or a multidict."""
    wanted = name.lower()
    return [v for k, v in headers.items() if k.lower() == wanted]


@dataclass(frozen=True, slots=True)
class MatchRule:
    """The ``match:`` of a scenario: all given parts must hold.

    ``method`` is compared case-insensitively; ``path`` is an ``fnmatch`` glob
    (case-sensitive, ``*`` also crosses ``/``) on the path without its query;
    ``headers`` maps lower-cased header names to ``fnmatch`` globs on their values
    (a header that is absent never matches, and a repeated header matches when any
    of its values does).
    """

    method: str | None = None
    path: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def matches(self, method: str, path: str, headers: Mapping[str, str]) -> bool:
        if self.method is not None and method.upper() != self.method:
            return False
        if self.path is not None and not fnmatchcase(path.split("?", 1)[0], self.path):
            return False
        for name, pattern in self.headers.items():
            if not any(fnmatchcase(v, pattern) for v in header_values(headers, name)):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario; ``faults`` are (fault name, validated config) in order."""

    name: str
    description: str = ""
    seed: int | None = None
    provider: str = "auto"
    format: str = "auto"
    match: MatchRule | None = None
    requests: frozenset[int] | None = None
    faults: tuple[tuple[str, FaultConfig], ...] = ()
    #: Where it came from: a file path, or the ``source`` given to parse_scenario.
    source: str = ""

    @property
    def needs_framing(self) -> bool:
        """True when any fault needs sse/ndjson framing."""
        faults = fault_registry.registry()
        return any(faults[name].needs_framing(cfg) for name, cfg in self.faults)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view (for the admin API); durations appear in seconds."""
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "provider": self.provider,
            "format": self.format,
            "match": None
            if self.match is None
            else {
                "method": self.match.method,
                "path": self.match.path,
                "headers": dict(self.match.headers),
            },
            "requests": None if self.requests is None else sorted(self.requests),
            "faults": [{n: c.model_dump(mode="json")} for n, c in self.faults],
            "source": self.source,
        }


# --------------------------------------------------------------------------- top level


class _MatchModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: Annotated[str, Field(min_length=1)] | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
    headers: dict[str, str] | None = None


class _TopLevel(BaseModel):
    """The keys of a scenario file other than the fault parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str | None = None
    description: str | None = None
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    provider: str = "auto"
    format: Literal["auto", "sse", "ndjson", "raw"] = "auto"
    match: _MatchModel | None = None
    requests: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] | None = None
    faults: list[Any]

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str | None) -> str | None:
        if v is not None and not _NAME_RE.fullmatch(v):
            raise ValueError(_NAME_RULE)
        if v == PASSTHROUGH:
            raise ValueError(f"{PASSTHROUGH!r} is reserved: it selects no scenario")
        return v

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, v: str) -> str:
        from chaosproxy.core.providers import PROVIDER_NAMES

        allowed = ("auto", *PROVIDER_NAMES)
        if v not in allowed:
            raise ValueError(f"must be one of: {', '.join(allowed)}")
        return v


_NAME_RULE = "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"

# --------------------------------------------------------------------------- loading


def load_scenario_file(path: str | Path) -> Scenario:
    """Load and validate one file; raises ScenarioError with every problem in it."""
    parsed = _load_file(Path(path))
    if parsed.scenario is None:
        raise ScenarioError(parsed.problems)
    return parsed.scenario


def parse_scenario(text: str | bytes, source: str, default_name: str | None = None) -> Scenario:
    """Validate a scenario given as YAML (or JSON) text; ``source`` names it in problems.

    Without a ``name:`` key the scenario is called ``default_name``; when that is None
    too, the missing name is a problem.
    """
    parsed = _parse(text, source, default_name)
    if parsed.scenario is None:
        raise ScenarioError(parsed.problems)
    return parsed.scenario


def load_scenarios(paths: Sequence[str | Path]) -> dict[str, Scenario]:
    """Load files and directories (their ``*.yaml``/``*.yml``, sorted, not recursive).

    Every problem of every file is collected before one ScenarioError is raised. The
    result keeps load order, which is the order ``match:`` rules are tried in.
    """
    scenarios, problems = _load_all(paths)
    if problems:
        raise ScenarioError(problems)
    return scenarios


def validate_paths(paths: Sequence[str | Path]) -> list[Problem]:
    """Every problem in ``paths`` (empty when all is valid), for ``chaosproxy validate``."""
    return _load_all(paths)[1]


def _expand(paths: Sequence[str | Path]) -> Iterator[tuple[Path, Problem | None]]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            try:
                entries = sorted(path.iterdir(), key=lambda p: p.name)
            except OSError as exc:
                yield path, Problem(str(path), 0, f"cannot list directory: {_os_reason(exc)}")
                continue
            for entry in entries:
                if entry.suffix in (".yaml", ".yml") and entry.is_file():
                    yield entry, None
        elif path.exists():
            yield path, None
        else:
            yield path, Problem(str(path), 0, "no such file or directory")


def _load_all(paths: Sequence[str | Path]) -> tuple[dict[str, Scenario], list[Problem]]:
    scenarios: dict[str, Scenario] = {}
    where: dict[str, str] = {}
    problems: list[Problem] = []
    seen_files: set[Path] = set()
    for path, problem in _expand(paths):
        if problem is not None:
            problems.append(problem)
            continue
        resolved = path.resolve()
        if resolved in seen_files:  # the same file named twice (a file and its directory)
            continue
        seen_files.add(resolved)
        parsed = _load_file(path)
        problems.extend(parsed.problems)
        scenario = parsed.scenario
        if scenario is None:
            continue
        if scenario.name in scenarios:
            other = where[scenario.name]
            message = f"name: duplicate scenario name {scenario.name!r} (also in {other})"
            problems.append(Problem(str(path), parsed.name_line, message))
            continue
        scenarios[scenario.name] = scenario
        where[scenario.name] = f"{path}:{parsed.name_line}"
    return scenarios, problems


@dataclass(frozen=True, slots=True)
class _Parsed:
    """The outcome of parsing one document: a scenario, or at least one problem."""

    scenario: Scenario | None
    problems: list[Problem]
    #: The line of the ``name:`` key, else of the top-level mapping.
    name_line: int = 1


def _load_file(path: Path) -> _Parsed:
    where = str(path)
    if not path.is_file():
        return _Parsed(None, [Problem(where, 0, "not a regular file")])
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # never more, whatever the file is
    except OSError as exc:
        return _Parsed(None, [Problem(where, 0, f"cannot read: {_os_reason(exc)}")])
    return _parse(data, where, path.stem)


def _os_reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


# --------------------------------------------------------------------------- parsing


def _parse(text: str | bytes, source: str, default_name: str | None) -> _Parsed:
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > MAX_FILE_BYTES:
        return _Parsed(None, [Problem(source, 0, "file is larger than 1 MiB")])
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            return _Parsed(None, [Problem(source, line, "not UTF-8 text")])
    if "\t" in text and text.lstrip().startswith("{"):
        text = _untab_json(text)
    return _Validator(text, source).run(default_name)


def _untab_json(text: str) -> str:
    """JSON indented with tabs is not YAML. In valid JSON a raw tab can only be
    whitespace between tokens, so spaces can take its place (lines stay the same)."""
    try:
        json.loads(text)
    except ValueError:
        return text
    return text.replace("\t", " ")


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting before Python's recursion limit would."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


_NODE_NOUNS: dict[type[Node], str] = {MappingNode: "a mapping", SequenceNode: "a list"}


class _Validator:
    """Validates one document, collecting located problems."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.loader = _Loader("")  # fed in compose(), where reader errors are caught
        self.source = source
        self.problems: list[Problem] = []
        self.name_line = 1

    def problem(self, line: int, path: Sequence[str | int], message: str) -> None:
        where = _dotted(path)
        self.problems.append(
            Problem(self.source, line, f"{where}: {message}" if where else message)
        )

    def value(self, node: Node) -> Any:
        return self.loader.construct_object(node, deep=True)

    def entries(self, node: MappingNode) -> list[tuple[Any, Node, Node]]:
        return [(self.value(k), k, v) for k, v in node.value]

    # -- the whole document

    def run(self, default_name: str | None) -> _Parsed:
        try:
            scenario = self.document(default_name)
        finally:
            self.loader.dispose()
        if self.problems:
            scenario = None
        problems = sorted(self.problems, key=lambda p: p.line)  # stable: same line keeps order
        return _Parsed(scenario, problems, self.name_line)

    def document(self, default_name: str | None) -> Scenario | None:
        root = self.compose()
        if root is None:
            return None
        self.name_line = _line(root)
        for k, _ in root.value:
            if isinstance(k, ScalarNode) and k.tag != _MERGE_TAG and k.value == "name":
                self.name_line = _line(k)
        try:
            data = self.loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            self.yaml_problem(exc)
            return None
        return self.scenario(root, data, default_name)

    def compose(self) -> MappingNode | None:
        try:
            self.loader = _Loader(self.text)
            root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            self.yaml_problem(exc)
            return None
        except yaml.reader.ReaderError as exc:
            line = self.text.count("\n", 0, exc.position) + 1
            self.problem(line, (), f"not valid YAML: {exc.reason}")
            return None
        if root is None:
            self.problem(1, (), "empty document: expected a mapping of scenario keys")
            return None
        if not isinstance(root, MappingNode):
            found = _NODE_NOUNS.get(type(root), "a single value")
            self.problem(_line(root), (), f"expected a mapping at the top level, found {found}")
            return None
        if not self.check_graph(root):
            return None
        return root

    def yaml_problem(self, exc: yaml.MarkedYAMLError) -> None:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 0
        text = ", ".join(str(p) for p in (exc.context, exc.problem) if p)
        self.problem(line, (), f"not valid YAML: {text}")

    def check_graph(self, root: Node) -> bool:
        """Refuse recursive aliases and alias bombs; report duplicate keys.

        PyYAML builds aliases by reference, so a "billion laughs" document is small in
        memory but huge once anything walks it (validation would). Expanded size is
        computed on the node graph with memoisation, iteratively (no recursion limit).
        """
        size: dict[int, int] = {}
        on_stack: set[int] = set()
        shared = False
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            children = _children(node)
            if done:
                on_stack.discard(key)
                size[key] = 1 + sum(size[id(c)] for c in children)
                continue
            if key in size:
                shared = True
                continue
            if key in on_stack:
                self.problem(_line(node), (), "recursive alias: a node contains itself")
                return False
            on_stack.add(key)
            stack.append((node, True))
            if isinstance(node, MappingNode):
                self.check_duplicate_keys(node)
            stack.extend((c, False) for c in reversed(children))
        if shared and size[id(root)] > MAX_EXPANDED_NODES:
            self.problem(
                0,
                (),
                f"aliases expand to more than {MAX_EXPANDED_NODES} nodes (an alias bomb?)",
            )
            return False
        return True

    def check_duplicate_keys(self, node: MappingNode) -> None:
        first: dict[tuple[str, str], int] = {}
        for k, _ in node.value:
            if not isinstance(k, ScalarNode) or k.tag == _MERGE_TAG:
                continue
            seen = first.get((k.tag, k.value))
            if seen is None:
                first[(k.tag, k.value)] = _line(k)
            else:
                self.problem(_line(k), (), f"duplicate key {k.value!r} (first at line {seen})")

    # -- the scenario

    def scenario(self, root: MappingNode, data: Any, default_name: str | None) -> Scenario | None:
        assert isinstance(data, dict)
        try:
            top = _TopLevel.model_validate(data)
        except ValidationError as exc:
            self.report(exc.errors(), _TopLevel, (), root, data, root_line=_line(root))
            top = None
        name = top.name if top is not None else None
        if top is not None and name is None:
            if default_name is None:
                self.problem(_line(root), ("name",), "required")
            elif default_name == PASSTHROUGH:
                self.problem(
                    _line(root),
                    ("name",),
                    f"{PASSTHROUGH!r} (from the file name) is reserved; set name:",
                )
            elif not _NAME_RE.fullmatch(default_name):
                self.problem(
                    _line(root),
                    ("name",),
                    f"{default_name!r} (from the file name) {_NAME_RULE}; set name:",
                )
            else:
                name = default_name
        faults = data.get("faults")
        raw = data.get("format") == "raw"
        configs: list[tuple[str, FaultConfig]] = []
        if isinstance(faults, list):
            faults_node = self.child(root, "faults")
            assert isinstance(faults_node, SequenceNode)
            for i, (item, item_node) in enumerate(zip(faults, faults_node.value, strict=True)):
                spec = self.fault(i, item, item_node, raw)
                if spec is not None:
                    configs.append(spec)
        if top is None or name is None or self.problems:
            return None
        match = None
        if top.match is not None:
            match = MatchRule(
                method=top.match.method.upper() if top.match.method is not None else None,
                path=top.match.path,
                headers={k.lower(): v for k, v in (top.match.headers or {}).items()},
            )
        return Scenario(
            name=name,
            description=top.description or "",
            seed=top.seed,
            provider=top.provider,
            format=top.format,
            match=match,
            requests=frozenset(top.requests) if top.requests is not None else None,
            faults=tuple(configs),
            source=self.source,
        )

    def child(self, node: MappingNode, key: str) -> Node | None:
        found = None
        for k, _, v_node in self.entries(node):
            if k == key:
                found = v_node  # the last one wins, as in the constructed dict
        return found

    def fault(self, i: int, item: Any, node: Node, raw: bool) -> tuple[str, FaultConfig] | None:
        path: tuple[str | int, ...] = ("faults", i)
        faults = fault_registry.registry()
        if isinstance(item, str):
            name, params, params_node, name_line = item, None, None, _line(node)
        elif isinstance(item, dict) and len(item) == 1 and isinstance(node, MappingNode):
            ((name, params),) = item.items()
            entries = self.entries(node)
            _, k_node, params_node = entries[-1]
            name_line = _line(k_node)
            if not isinstance(name, str):
                self.problem(name_line, path, f"a fault name must be a string, not {name!r}")
                return None
        elif isinstance(item, dict) and item:
            keys = [str(k) for k in item]
            known = [k for k in keys if k in faults]
            hint = ""
            if len(known) == 1:
                hint = f" (indent the parameters under {known[0]!r}?)"
            self.problem(
                _line(node),
                path,
                f"one fault per item, found keys: {', '.join(keys)}{hint}",
            )
            return None
        else:
            self.problem(
                _line(node), path, "must be a fault name or a one-key mapping {name: params}"
            )
            return None

        if name not in faults:
            close = difflib.get_close_matches(name, list(faults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            if not close:
                hint = f"; known faults: {', '.join(sorted(faults))}" if faults else ""
            self.problem(name_line, path, f"unknown fault {name!r}{hint}")
            return None
        cls = faults[name]
        fault_path = (*path, name)
        try:
            config = cls.Config.model_validate({} if params is None else params)
        except ValidationError as exc:
            self.report(exc.errors(), cls.Config, fault_path, params_node, params, name_line)
            return None
        if raw and cls.needs_framing(config):
            self.problem(
                name_line,
                fault_path,
                "needs sse or ndjson framing; it cannot apply with format: raw",
            )
            return None
        return name, config

    # -- pydantic errors, located

    def report(
        self,
        errors: list[ErrorDetails],
        model: type[BaseModel],
        base: tuple[str | int, ...],
        node: Node | None,
        data: Any,
        root_line: int,
    ) -> None:
        located = [self.locate(err, node, data, root_line) for err in errors]
        for line, path, message in _collapse_unions(located, model):
            self.problem(line, (*base, *path), message)

    def locate(self, err: ErrorDetails, node: Node | None, data: Any, line: int) -> _Located:
        """Follow ``err['loc']`` through the data and its nodes.

        Elements that name no key or item (pydantic's union branch tags, such as
        ``constrained-int``) are skipped; the first one is kept as the union point.
        """
        path: list[str | int] = []
        union: tuple[int, str] | None = None
        loc = list(err["loc"])
        for n, elem in enumerate(loc):
            last = n == len(loc) - 1
            if isinstance(data, dict) and elem in data:
                data = data[elem]
                path.append(elem)
                node, line = self._step_key(node, elem, line)
            elif isinstance(data, list) and isinstance(elem, int) and 0 <= elem < len(data):
                data = data[elem]
                path.append(elem)
                node = node.value[elem] if isinstance(node, SequenceNode) else None
                line = _line(node) if node is not None else line
            elif last and err["type"] == "missing":
                path.append(elem)
            elif isinstance(elem, str) and union is None:
                union = (len(path), elem)
            elif isinstance(elem, int):
                path.append(elem)
        return _Located(err, line, tuple(path), union)

    def _step_key(self, node: Node | None, key: Any, line: int) -> tuple[Node | None, int]:
        if not isinstance(node, MappingNode):
            return None, line
        for k, k_node, v_node in reversed(self.entries(node)):
            if k == key:
                return v_node, _line(k_node)
        return None, line


@dataclass(frozen=True, slots=True)
class _Located:
    err: ErrorDetails
    line: int
    path: tuple[str | int, ...]
    union: tuple[int, str] | None


# Type errors: the value had the wrong type for a branch. Each maps to a noun.
_TYPE_NOUNS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
}


def _collapse_unions(
    located: list[_Located], model: type[BaseModel]
) -> Iterator[tuple[int, tuple[str | int, ...], str]]:
    """Turn errors into (line, path, message), merging the branches of a union.

    When a value fits no branch of a union, pydantic reports every branch. A branch
    whose only complaint is the type of the value itself is noise when another branch
    got further (right type, wrong value): that one is reported alone. When every
    branch failed on the type, one message names all: "must be an integer or a list".
    """
    groups: dict[tuple[tuple[str | int, ...], int], dict[str, list[_Located]]] = {}
    order: list[_Located | tuple[tuple[str | int, ...], int]] = []
    for item in located:
        if item.union is None:
            order.append(item)
            continue
        depth, tag = item.union
        point = (item.path[:depth], depth)
        if point not in groups:
            groups[point] = {}
            order.append(point)
        groups[point].setdefault(tag, []).append(item)
    seen: set[tuple[int, tuple[str | int, ...], str]] = set()
    for entry in order:
        if isinstance(entry, _Located):
            out = [entry]
        else:
            branches = groups[entry]
            at_point = len(entry[0])

            def type_only(items: list[_Located], at: int = at_point) -> bool:
                return all(len(i.path) == at and _noun(i.err) is not None for i in items)

            close = [b for b in branches.values() if not type_only(b)]
            if close:
                out = [i for b in close for i in b]
            else:
                first = next(iter(branches.values()))[0]
                nouns = _unique(_noun(i.err) or "" for b in branches.values() for i in b)
                result = (first.line, first.path, "must be " + " or ".join(nouns))
                if result not in seen:
                    seen.add(result)
                    yield result
                continue
        for item in out:
            result = (item.line, *_phrase(item, model))
            if result not in seen:
                seen.add(result)
                yield result


def _noun(err: ErrorDetails) -> str | None:
    """What the value should have been, for an error that says "not this kind of value"
    (a wrong type, or none of a fixed set of values); None for other errors."""
    kind = err["type"]
    if kind in ("literal_error", "enum"):
        expected = str((err.get("ctx") or {}).get("expected", ""))
        options = [o.strip().strip("'\"") for o in re.split(r",| or ", expected) if o.strip()]
        return f"one of: {', '.join(options)}"
    return _TYPE_NOUNS.get(kind)


def _phrase(item: _Located, model: type[BaseModel]) -> tuple[tuple[str | int, ...], str]:
    """(path, short human message) for one located error."""
    err = item.err
    kind = err["type"]
    ctx = err.get("ctx") or {}
    path = item.path
    if kind == "missing":
        if path and isinstance(path[-1], int):
            return path[:-1], f"too few items (expected at least {path[-1] + 1})"
        return path, "required"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, path[:-1])
        key = str(path[-1]) if path else ""
        hint = ""
        if allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f", did you mean {close[0]!r}?" if close else ""
            hint += f" (allowed: {', '.join(allowed)})"
        return path, f"unknown key{hint}"
    noun = _noun(err)
    if noun is not None:
        return path, f"must be {noun}"
    bounds = {
        "greater_than_equal": (">=", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("<=", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        return path, f"must be {op} {_number(ctx.get(key))}"
    if kind == "too_short":
        n = int(ctx.get("min_length", 1))
        return path, "must not be empty" if n == 1 else f"must have at least {n} items"
    if kind == "too_long":
        return path, f"must have at most {ctx.get('max_length')} items"
    if kind == "string_too_short":
        n = int(ctx.get("min_length", 1))
        return path, "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return path, f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        return path, f"must match {ctx.get('pattern')}"
    if kind == "multiple_of":
        return path, f"must be a multiple of {_number(ctx.get('multiple_of'))}"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return path, msg


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _allowed_keys(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys of the model found at ``path`` inside ``model`` (best effort)."""
    current: Any = model
    for elem in path:
        if isinstance(elem, int):
            current = _item_type(current)
        else:
            fields = _model_fields(current)
            if fields is None or elem not in fields:
                return []
            current = fields[elem]
        if current is None:
            return []
    fields = _model_fields(current)
    return list(fields) if fields is not None else []


def _model_fields(tp: Any) -> dict[str, Any] | None:
    for candidate in _flatten(tp):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return {(f.alias or name): f.annotation for name, f in candidate.model_fields.items()}
    return None


def _item_type(tp: Any) -> Any:
    for candidate in _flatten(tp):
        args = get_args(candidate)
        if args:
            return args[0]
    return None


def _flatten(tp: Any) -> list[Any]:
    """The members of a union / the type inside Annotated, recursively."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _flatten(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(tp) for m in _flatten(arg)]
    return [tp]


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _dotted(path: Sequence[str | int]) -> str:
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        else:
            out += f".{elem}" if out else str(elem)
    return out


__all__ = [
    "FORMATS",
    "MAX_FILE_BYTES",
    "MatchRule",
    "Problem",
    "Scenario",
    "ScenarioError",
    "header_values",
    "load_scenario_file",
    "load_scenarios",
    "parse_scenario",
    "validate_paths",
]
