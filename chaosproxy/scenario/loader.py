"""Scenario files: read safely, validated with every problem located to its line.

A scenario file is one YAML mapping (docs/scenarios.md). It is parsed with PyYAML's
``SafeLoader`` (``yaml.safe_load`` semantics: no custom tags), but composed to nodes
first so that every problem can be reported with the line of the key or value at
fault, all at once. Fault parameters are validated by each fault's own ``Config``
model, found through :func:`chaosproxy.core.faults.registry` at call time.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from chaosproxy.core import faults as fault_registry
from chaosproxy.core.faults import FaultConfig
from chaosproxy.core.seeds import SEED_RANGE
from chaosproxy.scenario.errors import Located, Problem, ScenarioError, dotted, phrase_errors
from chaosproxy.scenario.fixtures import Fixture, FixtureFile
from chaosproxy.scenario.model import Scenario, name_error

#: Files larger than this are refused before parsing.
MAX_FILE_BYTES = 1024 * 1024
#: A document whose aliases expand to more nodes than this is refused (alias bomb).
MAX_EXPANDED_NODES = 100_000
#: Deeper nesting is refused (PyYAML composes recursively; nothing legitimate nests so).
MAX_DEPTH = 64
#: A decimal integer with more digits is refused before it is converted (Python's own
#: limit, 4300 digits, would raise its own message; no setting needs a tenth of this).
MAX_INT_DIGITS = 100
#: A scenario with more faults is refused: each fault is asked about every event, so a
#: request's CPU grows with their number (docs/scenarios.md, Limits; the pipeline's
#: fault budget bounds what faults that multiply events cost). The library's largest
#: has two, explore draws at most four; 11,352 cost a request 24 s of CPU.
MAX_FAULTS = 32

#: A UTF-16 surrogate: YAML decodes each ``\uD83D`` escape alone (a JSON body encoded
#: with ASCII escapes, as Python's ``json.dumps`` does, has pairs of them).
_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a JSON string may hold raw that YAML reads otherwise: DEL and beyond ASCII.
_NOT_YAML_AS_IS = re.compile("[^\x00-\x7e]")
#: What makes a JSON text need that (or a tab: see _json_for_yaml).
_NOT_PLAIN = re.compile("[^\x00-\x08\x0a-\x7e]")

_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
#: Keys a document may give as null, meaning "not given".
_NULLABLE_KEYS = ("name", "description")
#: Scenario fields that are not document keys (excluded from the model's dump).
_NOT_KEYS = tuple(name for name, f in Scenario.model_fields.items() if f.exclude)


def load_scenario_file(path: str | Path) -> Scenario:
    """Load and validate one file; raises ScenarioError with every problem in it."""
    parsed = _load_file(Path(path))
    if parsed.scenario is None:
        raise ScenarioError(parsed.problems)
    return parsed.scenario


def parse_scenario(
    text: str | bytes,
    source: str,
    default_name: str | None = None,
    *,
    read_only: bool = False,
) -> Scenario:
    """Validate a scenario given as YAML (or JSON) text; ``source`` names it in problems.

    Without a ``name:`` key the scenario is called ``default_name``; when that is None
    too, the missing name is a problem. With ``read_only``, the read-only fields of
    :meth:`Scenario.as_dict` (such as ``source``) are ignored rather than refused, so
    what the admin API shows can be given back unchanged.
    """
    parsed = _parse(text, source, default_name, read_only=read_only)
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


def scan_paths(paths: Sequence[str | Path]) -> tuple[dict[str, Scenario], list[Problem]]:
    """The valid scenarios in ``paths`` (files and directories, as :func:`load_scenarios`
    reads them) and every problem in them, without raising: a watched directory's
    reload (:mod:`chaosproxy.scenario.watch`) applies the set only when there are none."""
    return _load_all(paths)


def validate_paths(paths: Sequence[str | Path]) -> list[Problem]:
    """Every problem in ``paths`` (empty when all is valid), for ``chaosproxy validate``."""
    return check_paths(paths)[1]


def check_paths(paths: Sequence[str | Path]) -> tuple[dict[str, Scenario], list[Problem]]:
    """The valid scenarios in ``paths`` and every problem, for ``chaosproxy validate``:
    unlike loading, a path with no scenario file in it is a problem too."""
    scenarios, problems = _load_all(paths)
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and not any(p for p, problem in _expand([path]) if problem is None):
            problems.append(Problem(str(path), 0, "no scenarios here"))
    return scenarios, problems


# --------------------------------------------------------------------------- fixtures


def parse_fixtures(text: str | bytes, source: str) -> tuple[Fixture, ...]:
    """Mock fixtures given as YAML (or JSON) text: a fixture file's mapping with a
    ``fixtures:`` list, or one fixture's mapping. Raises ScenarioError with every
    problem, each located to its line as a scenario's are (``source`` names the text)."""
    parsed, problems = _parse_fixtures(text, source)
    if problems:
        raise ScenarioError(problems)
    return parsed


def load_fixture_files(paths: Sequence[str | Path]) -> tuple[Fixture, ...]:
    """The fixtures of fixture files and directories (their ``*.yaml``, ``*.yml`` and
    ``*.json``, sorted), in order: files in the order given, fixtures in file order.
    Every problem of every file is collected before one ScenarioError is raised; a path
    with no fixture file in it is a problem."""
    found: list[Fixture] = []
    problems: list[Problem] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            try:
                files = sorted(
                    (p for p in path.iterdir() if p.suffix in _FIXTURE_SUFFIXES and p.is_file()),
                    key=lambda p: p.name,
                )
            except OSError as exc:
                problems.append(Problem(str(path), 0, f"cannot list directory: {_os_reason(exc)}"))
                continue
            if not files:
                problems.append(Problem(str(path), 0, "no fixture files here (*.yaml, *.json)"))
        elif path.exists():
            files = [path]
        else:
            problems.append(Problem(str(path), 0, "no such file or directory"))
            continue
        for file in files:
            if file.resolve() in seen:
                continue
            seen.add(file.resolve())
            data, problem = _read_file(file)
            if problem is not None:
                problems.append(problem)
                continue
            fixtures, more = _parse_fixtures(data, str(file), whole_file=True)
            found.extend(fixtures)
            problems.extend(more)
    if problems:
        raise ScenarioError(problems)
    return tuple(found)


_FIXTURE_SUFFIXES = (".yaml", ".yml", ".json")


def _parse_fixtures(
    text: str | bytes, source: str, *, whole_file: bool = False
) -> tuple[tuple[Fixture, ...], list[Problem]]:
    validator = _FixtureValidator(source, whole_file=whole_file)
    fixtures = validator.read(text)
    problems = sorted(validator.problems, key=lambda p: p.line)
    return (fixtures or (), problems)


class _FixtureValidator:
    """A fixture document through the scenario validator's checks (size, encoding,
    YAML safety, alias bombs, huge integers), then the fixture models, every problem
    located to its line."""

    def __init__(self, source: str, *, whole_file: bool) -> None:
        self.source = source
        self.whole_file = whole_file
        self.problems: list[Problem] = []

    def read(self, given: str | bytes) -> tuple[Fixture, ...] | None:
        text = _document_text(given, self.source)
        if isinstance(text, Problem):
            self.problems.append(text)
            return None
        checker = _Document(text, self.source)
        try:
            root = checker.compose()
            document = None if root is None else checker.loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            checker.yaml_problem(exc)
            root = None
        finally:
            checker.loader.dispose()
        self.problems += checker.problems
        if root is None or checker.problems:
            return None
        assert isinstance(document, dict)
        model: type[BaseModel] = FixtureFile
        if not self.whole_file and "fixtures" not in document:
            model = Fixture
        try:
            validated = model.model_validate(document)
        except ValidationError as exc:
            checker.report(exc.errors(), model, (), root, document, root_line=_line(root))
            self.problems += checker.problems
            return None
        if isinstance(validated, FixtureFile):
            return validated.fixtures
        assert isinstance(validated, Fixture)
        return (validated,)


def _read_file(path: Path) -> tuple[bytes, Problem | None]:
    if not path.is_file():
        return b"", Problem(str(path), 0, "not a regular file")
    try:
        with path.open("rb") as f:
            return f.read(MAX_FILE_BYTES + 1), None
    except OSError as exc:
        return b"", Problem(str(path), 0, f"cannot read: {_os_reason(exc)}")


# --------------------------------------------------------------------------- the library

#: The built-in scenario library's directory: ``scenarios/`` at the top of the repository,
#: and in an installed package ``chaosproxy/scenarios/`` (setup.py copies it there).
LIBRARY_DIR = "scenarios"


def library_root() -> Traversable:
    """Where the built-in library is read from: the package's data in an installed wheel,
    else (the package runs from a checkout: an editable install, the tests) the
    repository's own ``scenarios/``, next to the package's directory."""
    package = resources.files("chaosproxy")
    packaged = package / LIBRARY_DIR
    if packaged.is_dir():
        return packaged
    # (resolved: a strict editable install links each source file from elsewhere)
    checkout = Path(str(package / "__init__.py")).resolve().parent.parent / LIBRARY_DIR
    return checkout if checkout.is_dir() else packaged


@functools.cache
def _library() -> tuple[Scenario, ...]:
    found: list[Scenario] = []
    problems: list[Problem] = []
    root = library_root()
    if not root.is_dir():  # a broken install
        raise ScenarioError([Problem(str(root), 0, "the built-in scenario library is missing")])
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        stem, dot, suffix = entry.name.rpartition(".")
        if not dot or suffix not in ("yaml", "yml") or not entry.is_file():
            continue
        parsed = _parse(entry.read_bytes(), str(entry), stem)
        problems.extend(parsed.problems)
        if parsed.scenario is not None:
            found.append(parsed.scenario)
    if problems:  # a broken package; its own tests keep this from shipping
        raise ScenarioError(problems)
    return tuple(found)


def load_library() -> dict[str, Scenario]:
    """The built-in scenario library (docs/scenario-library.md), in name order; a new dict
    each call (the scenarios themselves are immutable and parsed once)."""
    return {s.name: s for s in _library()}


def with_library(scenarios: Mapping[str, Scenario]) -> dict[str, Scenario]:
    """The built-in library first, then ``scenarios``: one of the same name overrides
    the built-in one (keeping its place in the ``match:`` order)."""
    return {**load_library(), **scenarios}


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
    """Why a file could not be read; for a permission, who asked (a container's mount
    owned by another user: the image runs as uid 10001)."""
    reason = (exc.strerror or str(exc)).lower()
    if isinstance(exc, PermissionError) and hasattr(os, "getuid"):
        reason += f" (this process runs as uid {os.getuid()}, gid {os.getgid()})"
    return reason


# --------------------------------------------------------------------------- parsing


def _parse(
    text: str | bytes, source: str, default_name: str | None, *, read_only: bool = False
) -> _Parsed:
    document = _document_text(text, source)
    if isinstance(document, Problem):
        return _Parsed(None, [document])
    return _Validator(document, source, read_only=read_only).run(default_name)


def _document_text(text: str | bytes, source: str) -> str | Problem:
    """A scenario or fixture document as text for the YAML reader, or the problem that
    stops it being read: larger than 1 MiB, or not UTF-8."""
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > MAX_FILE_BYTES:
        return Problem(source, 0, "file is larger than 1 MiB")
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return Problem(source, data.count(b"\n", 0, exc.start) + 1, "not UTF-8 text")
    if text.lstrip()[:1] in ("{", "[") and _NOT_PLAIN.search(text) is not None:
        text = _json_for_yaml(text)
    return text


def _json_for_yaml(text: str) -> str:
    """JSON text as the YAML reader must see it to read what JSON means (lines stay the
    same). Valid JSON only (anything else is YAML's to judge):

    - indented with tabs, it is not YAML; in valid JSON a raw tab can only be whitespace
      between tokens, so spaces can take its place;
    - DEL and any character outside ASCII can only be inside a string, where YAML reads
      some of them otherwise than JSON (U+0085, U+2028 and U+2029 are line breaks to
      YAML, folded into a space; DEL and C1 controls are refused): each is written as
      JSON's own escape (``\\u0085``; a pair for an astral character, joined again by
      the validator)."""
    try:
        json.loads(text)
    except ValueError:
        return text
    text = text.replace("\t", " ")
    return _NOT_YAML_AS_IS.sub(lambda m: json.dumps(m.group())[1:-1], text)


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


class _Document:
    """One YAML document read safely, collecting located problems: composed with the
    safety checks (a mapping at the top, no alias bomb or recursive alias, no
    duplicate key, no huge integer, surrogate pairs joined) before anything converts
    it, and pydantic's errors about it located to their lines."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.loader = _Loader("")  # fed in compose(), where reader errors are caught
        self.source = source
        self.problems: list[Problem] = []

    def problem(self, line: int, path: Sequence[str | int], message: str) -> None:
        where = dotted(path)
        self.problems.append(
            Problem(self.source, line, f"{where}: {message}" if where else message)
        )

    def value(self, node: Node) -> Any:
        return self.loader.construct_object(node, deep=True)

    def entries(self, node: MappingNode) -> list[tuple[Any, Node, Node]]:
        return [(self.value(k), k, v) for k, v in node.value]

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
        if not self.check_graph(root) or not self.check_scalars(root):
            return None
        return root

    def yaml_problem(self, exc: yaml.MarkedYAMLError) -> None:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 0
        text = ", ".join(str(p) for p in (exc.context, exc.problem) if p)
        lines = self.text.split("\n")
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        indent = source[: len(source) - len(source.lstrip(" \t"))]
        # PyYAML says "found character '\t' that cannot start any token".
        if "\t" in indent:
            text = "a tab in the indentation: YAML indents with spaces only"
        elif "'\\t'" in text and mark is not None:
            text = f"a tab at column {mark.column + 1}: YAML wants spaces there"
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

    def check_scalars(self, root: Node) -> bool:
        """Check every scalar before anything converts it, each problem at its line and
        path: decimal integers of more than MAX_INT_DIGITS digits are refused (a seed of
        thousands of digits gets the seed's range, not Python's conversion limit), and
        escaped UTF-16 surrogate pairs (``"\\ud83d\\udc4d"``, as JSON allows) are joined
        into their character, a lone surrogate being refused: it is no text."""
        found = False
        seen: set[int] = set()
        stack: list[tuple[Node, tuple[str | int, ...]]] = [(root, ())]
        while stack:
            node, path = stack.pop()
            if id(node) in seen:  # an alias: checked where it was defined
                continue
            seen.add(id(node))
            if isinstance(node, MappingNode):
                for k, v in reversed(node.value):
                    merge = isinstance(k, ScalarNode) and k.tag == _MERGE_TAG
                    if isinstance(k, ScalarNode):
                        found = not self.join_surrogates(k, path) or found
                    key = k.value if isinstance(k, ScalarNode) else "?"
                    stack.append((v, path if merge else (*path, key)))
            elif isinstance(node, SequenceNode):
                stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(node.value))))
            elif isinstance(node, ScalarNode):
                found = not self.join_surrogates(node, path) or found
                if node.tag == _INT_TAG:
                    digits = _decimal_digits(node.value)
                    if digits > MAX_INT_DIGITS:
                        found = True
                        if path == ("seed",):
                            message = f"must be {SEED_RANGE}"
                        else:
                            message = f"must be an integer of at most {MAX_INT_DIGITS} digits"
                        self.problem(_line(node), path, f"{message} (this one has {digits} digits)")
        return not found

    def join_surrogates(self, node: ScalarNode, path: tuple[str | int, ...]) -> bool:
        """Join the surrogate pairs of a scalar's text in place; False (and a problem
        naming where) when a surrogate has no partner."""
        value = node.value
        if not isinstance(value, str) or _SURROGATE.search(value) is None:
            return True
        try:
            node.value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError as exc:
            units = value.encode("utf-16-le", "surrogatepass")
            unit = int.from_bytes(units[exc.start : exc.start + 2], "little")
            # The character's index in the text (code units before it, pairs as one).
            index = len(units[: exc.start].decode("utf-16-le", "surrogatepass"))
            mark = node.start_mark
            self.problem(
                _line(node),
                path,
                f"a lone UTF-16 surrogate \\u{unit:04x} (character {index + 1} of the "
                f"text starting at column {mark.column + 1}): not text; escape a whole "
                "pair, or send the character as UTF-8",
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
        for line, path, message in phrase_errors(located, model):
            self.problem(line, (*base, *path), message)

    def locate(self, err: ErrorDetails, node: Node | None, data: Any, line: int) -> Located:
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
        return Located(err, line, tuple(path), union)

    def _step_key(self, node: Node | None, key: Any, line: int) -> tuple[Node | None, int]:
        if not isinstance(node, MappingNode):
            return None, line
        for k, k_node, v_node in reversed(self.entries(node)):
            if k == key:
                return v_node, _line(k_node)
        return None, line


class _Validator:
    """Validates one scenario document (read safely by its :class:`_Document`),
    collecting located problems."""

    def __init__(self, text: str, source: str, *, read_only: bool = False) -> None:
        self.doc = _Document(text, source)
        #: Ignore the read-only keys of Scenario.as_dict() instead of refusing them.
        self.ignore_read_only = read_only
        self.source = source
        #: The document's problems (the same list).
        self.problems = self.doc.problems
        self.name_line = 1

    def problem(self, line: int, path: Sequence[str | int], message: str) -> None:
        self.doc.problem(line, path, message)

    # -- the whole document

    def run(self, default_name: str | None) -> _Parsed:
        try:
            scenario = self.document(default_name)
        finally:
            self.doc.loader.dispose()
        if self.problems:
            scenario = None
        problems = sorted(self.problems, key=lambda p: p.line)  # stable: same line keeps order
        return _Parsed(scenario, problems, self.name_line)

    def document(self, default_name: str | None) -> Scenario | None:
        root = self.doc.compose()
        if root is None:
            return None
        self.name_line = _line(root)
        for k, _ in root.value:
            if isinstance(k, ScalarNode) and k.tag != _MERGE_TAG and k.value == "name":
                self.name_line = _line(k)
        try:
            data = self.doc.loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            self.doc.yaml_problem(exc)
            return None
        return self.scenario(root, data, default_name)

    # -- the scenario

    def scenario(self, root: MappingNode, data: Any, default_name: str | None) -> Scenario | None:
        assert isinstance(data, dict)
        keys = self.keys(root, data)
        name = data.get("name")
        if keys is not None and name is None:
            name = self.default_name(root, default_name)
        faults = data.get("faults")
        raw = data.get("format") == "raw"
        provider = data.get("provider")
        configs: list[tuple[str, FaultConfig]] = []
        if isinstance(faults, list) and len(faults) > MAX_FAULTS:
            lines = [_line(k) for k, _ in root.value if getattr(k, "value", None) == "faults"]
            line = lines[-1] if lines else _line(root)  # the key's (the last one wins)
            self.problem(
                line,
                ("faults",),
                f"at most {MAX_FAULTS} faults per scenario (this one has {len(faults)}): "
                "every fault is asked about every event",
            )
        elif isinstance(faults, list):
            faults_node = self.child(root, "faults")
            assert isinstance(faults_node, SequenceNode)
            for i, (item, item_node) in enumerate(zip(faults, faults_node.value, strict=True)):
                spec = self.fault(i, item, item_node, raw, provider)
                if spec is not None:
                    configs.append(spec)
        if keys is None or name is None or self.problems:
            return None
        fields = {**keys, "name": name, "faults": tuple(configs), "source": self.source}
        return Scenario.model_validate(fields)

    def keys(self, root: MappingNode, data: dict[Any, Any]) -> dict[Any, Any] | None:
        """Validate the document's keys with the Scenario model itself; the valid keys
        in the model's terms, or None.

        A document may leave ``name`` (then named by the caller) and ``description``
        null; its fault list is checked item by item by :meth:`fault`; and a field
        that no document may set (``source``) is refused as an unknown key.
        """
        given = {k: v for k, v in data.items() if not (k in _NULLABLE_KEYS and v is None)}
        if isinstance(given.get("faults"), list):
            given["faults"] = ()
        refused = [k for k in given if k in _NOT_KEYS]
        for k in refused:
            del given[k]
        if self.ignore_read_only:
            refused = []
        errors: list[ErrorDetails] = []
        try:
            Scenario.model_validate(given)
        except ValidationError as exc:
            errors = [e for e in exc.errors() if e["loc"] != ("name",) or e["type"] != "missing"]
        errors = _with_unknown_keys(errors, refused, data)
        self.doc.report(errors, Scenario, (), root, data, root_line=_line(root))
        return None if errors else given

    def default_name(self, root: MappingNode, default_name: str | None) -> str | None:
        if default_name is None:
            self.problem(_line(root), ("name",), "required")
            return None
        why = name_error(default_name)
        if why is not None:
            message = f"{default_name!r} (from the file name) {why}; set name:"
            self.problem(_line(root), ("name",), message)
            return None
        return default_name

    def child(self, node: MappingNode, key: str) -> Node | None:
        found = None
        for k, _, v_node in self.doc.entries(node):
            if k == key:
                found = v_node  # the last one wins, as in the constructed dict
        return found

    def fault(
        self, i: int, item: Any, node: Node, raw: bool, provider: Any = None
    ) -> tuple[str, FaultConfig] | None:
        path: tuple[str | int, ...] = ("faults", i)
        faults = fault_registry.registry()
        if isinstance(item, str):
            name, params, params_node, name_line = item, None, None, _line(node)
        elif isinstance(item, dict) and len(item) == 1 and isinstance(node, MappingNode):
            ((name, params),) = item.items()
            entries = self.doc.entries(node)
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
            self.doc.report(exc.errors(), cls.Config, fault_path, params_node, params, name_line)
            return None
        if raw and cls.needs_framing(config):
            self.problem(
                name_line,
                fault_path,
                "needs sse or ndjson framing; it cannot apply with format: raw",
            )
            return None
        if isinstance(provider, str) and provider != "auto":
            why = cls.provider_problem(config, provider)
            if why is not None:
                self.problem(
                    name_line, fault_path, f"cannot apply with provider: {provider}: {why}"
                )
                return None
        return name, config


def _decimal_digits(text: str) -> int:
    """How many digits PyYAML would give ``int()`` for an int scalar; 0 for the forms it
    converts otherwise (``0x``, ``0b``, octal, ``1:30``), which have no such limit."""
    value = text.replace("_", "").lstrip("+-")
    if value.startswith("0") or ":" in value:
        return 0
    return len(value)


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _with_unknown_keys(
    errors: list[ErrorDetails], keys: list[Any], data: dict[Any, Any]
) -> list[ErrorDetails]:
    """``errors`` plus an unknown-key error for each of ``keys``, where pydantic puts
    its own: after the field errors, in the document's key order."""
    if not keys:
        return errors

    def unknown(e: ErrorDetails) -> bool:
        return e["type"] == "extra_forbidden" and len(e["loc"]) == 1

    added: list[ErrorDetails] = [
        {
            "type": "extra_forbidden",
            "loc": (k,),
            "msg": "Extra inputs are not permitted",
            "input": data[k],
        }
        for k in keys
    ]
    order = {k: i for i, k in enumerate(data)}
    extras = sorted([*filter(unknown, errors), *added], key=lambda e: order[e["loc"][0]])
    return [e for e in errors if not unknown(e)] + extras
