"""Compiled and pure (docs/architecture.md, "Compiled modules").

The wheel compiles the modules of ``chaosproxy._build.COMPILED`` with mypyc; the pure
package (an editable install, a machine without a compiler, ``CHAOSPROXY_PURE=1``)
runs their sources. The whole suite runs both ways in CI (``.ci/run`` sets
``CHAOSPROXY_EXPECT_BUILD``), and these tests say which way it runs and keep each
hazard met on the way from coming back, compiled or not: most of them read the
compiled modules' source, so a developer's pure run catches them before a build does.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import pkgutil
import subprocess
import sys
from collections.abc import Collection, Iterable, Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import FunctionType, ModuleType

import pytest
from pydantic import BaseModel

import chaosproxy
from chaosproxy._build import COMPILED, NATIVE, PURE_ENV, build, is_compiled
from chaosproxy.core.framing import FramingError, make_framer
from chaosproxy.observe.logs import FrameLog
from chaosproxy.scenario import ScenarioError, parse_scenario
from tests.support.repo import REPO

PACKAGE = Path(chaosproxy.__file__).parent
#: Which way this run must be (set by .ci/run); unset: either, but all of one way.
EXPECTED = os.environ.get("CHAOSPROXY_EXPECT_BUILD")


def source(module: str) -> Path:
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def tree(module: str) -> ast.Module:
    return ast.parse(source(module).read_text(), str(source(module)))


def _run(code: str, **env: str) -> str:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    if not env.get(PURE_ENV):
        environ.pop(PURE_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------ which way this run is


def test_this_run_loads_the_modules_it_was_asked_for() -> None:
    compiled = [name for name in COMPILED if is_compiled(name)]
    assert compiled in ([], list(COMPILED)), "compiled modules never mix with sources"
    if EXPECTED is None:
        return
    assert build() == EXPECTED
    if EXPECTED == "pure":
        extensions = [
            name
            for name, module in sys.modules.items()
            if name.startswith("chaosproxy")
            and (getattr(module, "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))
        ]
        assert extensions == []
    else:
        assert os.environ.get(PURE_ENV, "") in ("", "0")
        assert compiled == list(COMPILED)


def test_the_c_routines_run_where_the_package_runs_compiled() -> None:
    """Each of ``NATIVE`` is its C routine (the extension module built beside the mypyc
    ones) in a compiled run, and its Python twin in a pure one (a pure build,
    ``CHAOSPROXY_PURE=1``); tests/observe/test_frameline.py checks the two agree."""
    for name in NATIVE:
        module = importlib.import_module(name)
        origin = getattr(module, "__file__", None) or ""
        assert origin.endswith(tuple(EXTENSION_SUFFIXES)) == (build() == "compiled"), origin
        assert ("native" if build() == "compiled" else "python") == module.KIND
        assert Path(origin).with_name(name.rsplit(".", 1)[1] + ".py").is_file()  # the twin


def test_a_new_process_runs_the_same_way_and_says_so() -> None:
    version = _run(
        "import sys; from chaosproxy.cli.main import main; sys.argv = ['chaosproxy', '--version']; "
        "main()",
        **({PURE_ENV: "1"} if os.environ.get(PURE_ENV) else {}),
    )
    assert version == f"chaosproxy {chaosproxy.__version__} ({build()})"


def test_pure_loads_no_compiled_module_even_where_they_are_installed() -> None:
    code = (
        "import sys, chaosproxy.cli.main, chaosproxy.control.start, chaosproxy.control.api\n"
        "import chaosproxy.control.admin\n"
        "from chaosproxy._build import COMPILED, build\n"
        "for name in COMPILED: __import__(name)\n"
        "print(build(), sorted(n for n, m in sys.modules.items() if n.startswith('chaosproxy')"
        " and not (getattr(m, '__file__', None) or '.py').endswith('.py')))"
    )
    assert _run(code, **{PURE_ENV: "1"}) == "pure []"


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"CC": "false"}, "no working C compiler"),
        ({"CHAOSPROXY_PURE_BUILD": "1"}, "CHAOSPROXY_PURE_BUILD is set"),
    ],
)
def test_the_build_is_pure_without_a_compiler_or_when_asked(
    env: dict[str, str], reason: str
) -> None:
    """What setup.py decides (a pure wheel, or mypyc), without building: ``CC=false`` is
    a compiler that fails."""
    code = "import runpy; print(runpy.run_path('setup.py', run_name='probe')['PURE_REASON'])"
    environ = {k: v for k, v in os.environ.items() if k not in ("CC", "CHAOSPROXY_PURE_BUILD")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(reason), proc.stdout


def test_a_compiled_build_says_so_where_the_person_waiting_sees_it() -> None:
    """setup.py's lines go to the terminal (pip hides a build's output unless it fails);
    without one (a CI log, here: a new session has no controlling terminal), to stderr."""
    code = "import runpy; runpy.run_path('setup.py', run_name='probe')['say']('compiling')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "compiling\n")


def test_the_compiled_list_names_modules_not_packages() -> None:
    # mypyc gives a package compiled into a shared library inside the package a wrong
    # __path__ (its submodules are then not found): no __init__ is compiled.
    for name in COMPILED:
        assert source(name).is_file(), name
        assert source(name).name != "__init__.py"


# ------------------------------------------------------------------ hazards


def _compiled_trees() -> Iterator[tuple[str, ast.Module]]:
    for name in COMPILED:
        yield name, tree(name)


def test_no_pydantic_in_a_compiled_module() -> None:
    """pydantic reads its validators' signatures and its fields' ``Annotated``
    metadata, which compiled code does not keep: in a compiled module a validator
    fails and ``Annotated[int, Field(ge=1)]`` silently stops validating. Models and
    validators live in uncompiled modules (the faults' configs, ``scenario/``)."""
    for name, module in _compiled_trees():
        for node in ast.walk(module):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                assert not node.module.startswith("pydantic"), name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("pydantic") for a in node.names), name
        defined = vars(importlib.import_module(name)).values()
        models = [c for c in defined if isinstance(c, type) and issubclass(c, BaseModel)]
        assert [m for m in models if m.__module__ == name] == [], name


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ("duplicate: {times: 0}", "times"),
        ("drop: {nth: 0}", "nth"),
        ("delay: {ms: -1}", "ms"),
        ("rechunk: {size: 0}", "size"),
    ],
)
def test_a_bound_on_a_fault_still_refuses_a_bad_value(fault: str, problem: str) -> None:
    """The session, the pipeline and every event go through compiled code; the bounds
    of the faults' configs must refuse what they refuse in the sources."""
    with pytest.raises(ScenarioError, match=problem):
        parse_scenario(f"name: s\nfaults:\n  - {fault}\n", "s.yaml")


def test_a_bytearray_or_memoryview_read_reaches_every_framer() -> None:
    """Compiled code checks an argument's type against its annotation: a bytearray
    given where ``bytes`` is annotated is a TypeError there, where Python took it. The
    framers take any bytes-like read (``BodyRead``), and give the same frames."""
    body = b'data: {"a": 1}\n\nevent: e\ndata: 2\n\n'
    for fmt in ("sse", "ndjson", "raw"):
        expected = make_framer(fmt).feed(body)
        for read in (bytearray(body), memoryview(body)):
            frames = make_framer(fmt).feed(read)
            assert frames == expected, (fmt, type(read))
            assert all(type(f.raw) is bytes for f in frames)


def _in_try_with_finally(module: ast.Module) -> Iterator[ast.stmt]:
    """``break`` and ``continue`` statements inside a ``try`` that has a ``finally``,
    within the same loop."""

    def visit(node: ast.AST, guarded: bool) -> Iterator[ast.stmt]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.For | ast.AsyncFor | ast.While):
                # a loop inside the try: its own break leaves only it
                for part in child.body:
                    yield from visit_stmt(part, False)
                for part in child.orelse:
                    yield from visit_stmt(part, guarded)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, False)
            elif isinstance(child, ast.Try | ast.TryStar) and child.finalbody:
                for part in [*child.body, *child.orelse]:
                    yield from visit_stmt(part, True)
                for handler in child.handlers:
                    yield from visit(handler, True)
                for part in child.finalbody:
                    yield from visit_stmt(part, guarded)
            elif isinstance(child, ast.Break | ast.Continue):
                if guarded:
                    yield child
            else:
                yield from visit(child, guarded)

    def visit_stmt(stmt: ast.stmt, guarded: bool) -> Iterator[ast.stmt]:
        holder = ast.Module(body=[stmt], type_ignores=[])
        yield from visit(holder, guarded)

    yield from visit(module, False)


def test_no_break_or_continue_inside_try_finally_in_a_compiled_module() -> None:
    """mypyc refuses ``break`` (and ``continue``) inside a ``try`` with a ``finally``
    (chaosproxy/upstream/connection.py had one): the build fails. Said here first."""
    for name, module in _compiled_trees():
        found = [node.lineno for node in _in_try_with_finally(module)]
        assert found == [], f"{source(name)}: lines {found}"


def test_the_checker_finds_a_break_inside_try_finally() -> None:
    bad = ast.parse(
        "async def f(it):\n"
        "    while True:\n"
        "        try:\n"
        "            x = await anext(it)\n"
        "        except StopAsyncIteration:\n"
        "            break\n"
        "        finally:\n"
        "            pass\n"
    )
    good = ast.parse(
        "def f(xs):\n"
        "    try:\n"
        "        for x in xs:\n"
        "            break\n"
        "    finally:\n"
        "        pass\n"
    )
    assert [n.lineno for n in _in_try_with_finally(bad)] == [6]
    assert list(_in_try_with_finally(good)) == []


def test_no_method_alias_in_the_body_of_a_compiled_class() -> None:
    """In a compiled class, ``info = msg`` in the class body is an attribute with no
    value, not a method: structlog called ``_Sink.info`` and found nothing. A method
    that another name must reach is defined under that name."""
    for name, module in _compiled_trees():
        for cls in (n for n in ast.walk(module) if isinstance(n, ast.ClassDef)):
            methods = {
                n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            for stmt in cls.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                    assert stmt.value.id not in methods, f"{name}.{cls.name}: line {stmt.lineno}"


def test_structlogs_bound_logger_writes_through_the_sink(tmp_path: Path) -> None:
    """The lines other than ``frame`` go through structlog's bound logger, which calls
    the sink's ``info``."""
    log = FrameLog.open(str(tmp_path / "log.jsonl"), fmt="json")
    log.for_request(request_id="r-1", scenario=None).info("request", seed=1, method="GET", path="/")
    log.close()
    (line,) = (tmp_path / "log.jsonl").read_bytes().splitlines()
    assert b'"event":"request"' in line and b'"method":"GET"' in line


def _patched_classes(path: Path) -> Iterator[tuple[int, str]]:
    """``monkeypatch.setattr(Name, ...)`` (or ``mock.patch.object(Name, ...)``), or a
    ``class X(Name)``, where ``Name`` is a class defined in a compiled module, however
    the test imported it (a module may re-export it: ``chaosproxy.control.admin.RequestStore``):
    (line, name)."""
    module = ast.parse(path.read_text())
    compiled_names = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chaosproxy"):
            assert node.module is not None
            imported = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(imported, alias.name, None)
                if isinstance(value, type) and value.__module__ in COMPILED:
                    compiled_names.add(alias.asname or alias.name)
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in compiled_names:
                    yield node.lineno, base.id
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setattr", "object")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in compiled_names
        ):
            yield node.lineno, node.args[0].id


def test_no_test_patches_or_subclasses_a_compiled_class() -> None:
    """A compiled class cannot be patched (its methods call each other directly: a
    patch is ignored or refused) nor subclassed in Python ("interpreted classes cannot
    inherit from compiled"). A test reaches the code through a seam instead: a fault
    that raises, an injected upstream, host or writer, a real client, the module's
    source."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if "node_modules" not in path.parts
        for line, name in _patched_classes(path)
    ]
    assert found == []


def _subclasses_of_compiled(
    modules: Iterable[ModuleType], compiled: Collection[str] = COMPILED
) -> list[str]:
    """Classes defined in these modules, outside the compiled ones, with a base defined
    in a compiled module: "interpreted classes cannot inherit from compiled", raised
    where the class statement runs (the supervisor of ``serve --workers`` once had one
    and did not start)."""
    found = []
    for module in modules:
        if module.__name__ in compiled:
            continue
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                found += [
                    f"{module.__name__}.{cls.__qualname__}({base.__module__}.{base.__qualname__})"
                    for base in cls.__mro__[1:]
                    if base.__module__ in compiled
                ]
    return found


def test_no_class_of_the_package_subclasses_a_compiled_class() -> None:
    names = [
        m.name
        for m in pkgutil.walk_packages(chaosproxy.__path__, "chaosproxy.")
        # Not __main__ (it runs the CLI), nor the compiled modules' shared library
        # (chaosproxy.__compiled__mypyc, listed as a module: a pure run must not load it).
        if not m.name.rpartition(".")[2].startswith("__")
    ]
    modules = [importlib.import_module(name) for name in names]
    assert len(modules) > len(COMPILED)
    assert _subclasses_of_compiled(modules) == []


def test_the_subclass_checker_finds_a_subclass_of_a_compiled_class() -> None:
    base, other = ModuleType("base"), ModuleType("elsewhere")
    exec("class Store: pass\n", vars(base))
    vars(base)["Store"].__module__ = "base"
    vars(other)["Store"] = vars(base)["Store"]
    exec("class Totals(Store): pass\nclass Plain: pass\n", vars(other))
    vars(other)["Totals"].__module__ = vars(other)["Plain"].__module__ = "elsewhere"
    assert _subclasses_of_compiled([base, other], compiled={"base"}) == [
        "elsewhere.Totals(base.Store)"
    ]


def test_the_patch_checker_finds_a_patched_compiled_class(tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text(
        "from chaosproxy.server.pump import BodyPump\n"
        "from chaosproxy.control.admin import RequestStore as Store\n"
        "def test(monkeypatch):\n"
        "    monkeypatch.setattr(BodyPump, '_send', None)\n"
        "    monkeypatch.setattr(Store, '__call__', None)\n"
        "class Recording(BodyPump):\n"
        "    pass\n"
    )
    found = sorted(_patched_classes(path))
    assert found == [(4, "BodyPump"), (5, "Store"), (6, "BodyPump")]


def test_a_size_error_met_while_finishing_the_pending_frame_is_a_framing_error() -> None:
    """``feed`` checked ``self._error is not None`` first, then called what may set it,
    then checked again: mypy kept the first narrowing (``None``), and compiled code
    trusts it: the second check raised TypeError instead of the framing error."""
    body = b"\xef\xbb\xbf\ndata: {}\n\ndata: "
    framer = make_framer("sse", max_size=4)
    with pytest.raises(FramingError):
        framer.feed(body)
        framer.eof()


def _rechecked_after_narrowing(module: ast.Module) -> Iterator[tuple[int, str]]:
    """``self.X`` compared with None after an earlier ``if self.X is [not] None:`` that
    raises or returns, in the same function, with no assignment to ``self.X`` between
    them: mypy still takes the first narrowing there, and compiled code trusts it, but a
    call in between may have changed the attribute. (line, attribute)."""

    def attr(node: ast.expr) -> str | None:
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            return node.attr
        return None

    def none_test(node: ast.expr) -> str | None:
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value is None
        ):
            return attr(node.left)
        return None

    for func in ast.walk(module):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        narrowed: dict[str, int] = {}
        for node in sorted(ast.walk(func), key=lambda n: (getattr(n, "lineno", 0), 0)):
            if (
                isinstance(node, ast.If)
                and (name := none_test(node.test)) is not None
                and isinstance(node.body[-1], ast.Raise | ast.Return)
            ):
                narrowed.setdefault(name, node.lineno)
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Attribute) and (name := attr(t)) is not None:
                            narrowed.pop(name, None)
            if isinstance(node, ast.Compare) and (name := none_test(node)) is not None:
                first = narrowed.get(name)
                if first is not None and node.lineno > first:
                    yield node.lineno, name


def test_no_attribute_is_checked_for_none_again_after_a_narrowing_check() -> None:
    found = [
        f"{source(name)}:{line}: self.{attr}"
        for name, module in _compiled_trees()
        for line, attr in _rechecked_after_narrowing(module)
    ]
    assert found == []


def test_the_narrowing_checker_finds_a_recheck() -> None:
    bad = ast.parse(
        "class F:\n"
        "    def feed(self, data):\n"
        "        if self._error is not None:\n"
        "            raise self._error\n"
        "        frames = self._more(data)\n"
        "        if self._error is not None:\n"
        "            return frames\n"
    )
    good = ast.parse(
        "class F:\n"
        "    def feed(self, data):\n"
        "        error = self._error\n"
        "        if error is not None:\n"
        "            raise error\n"
        "        if self._error is not None:\n"
        "            return []\n"
    )
    assert list(_rechecked_after_narrowing(bad)) == [(6, "_error")]
    assert list(_rechecked_after_narrowing(good)) == []


def test_a_compiled_class_has_no_base_from_a_dependency() -> None:
    """The build treats the dependencies as unknown (setup.py): a compiled class that
    subclassed one (``prometheus_client``'s ``Collector``) crashed the process. Bases
    come from the standard library or from the compiled modules."""
    allowed = {*sys.stdlib_module_names, *COMPILED}
    for name in COMPILED:
        for cls in vars(importlib.import_module(name)).values():
            if isinstance(cls, type) and cls.__module__ == name:
                foreign = [
                    f"{base.__module__}.{base.__qualname__}"
                    for base in cls.__mro__[1:]
                    if base.__module__.split(".")[0] not in allowed
                    and base.__module__ not in allowed
                    and base.__module__ != "typing_extensions"
                ]
                assert foreign == [], f"{name}.{cls.__qualname__}"


#: The classes made once or more per event on the hot path (a frame, its event, its
#: write): a generated ``__init__`` would be interpreted Python on every event.
PER_EVENT_CLASSES = ("core.frames.Frame", "core.events.Event", "core.actions.Send")


@pytest.mark.parametrize("where", PER_EVENT_CLASSES)
def test_a_per_event_dataclass_has_an_init_of_its_own(where: str) -> None:
    """mypyc compiles a dataclass's methods but not the ``__init__`` that ``@dataclass``
    generates (Python, run through the interpreter: 7.1k of a framed event's 53.6k
    instructions, issue 34). These take ``init=False`` and write their own, compiled
    when the module is."""
    module_name, _, name = f"chaosproxy.{where}".rpartition(".")
    module = importlib.import_module(module_name)
    cls = getattr(module, name)
    assert cls.__dataclass_params__.init is False
    assert "__init__" in vars(cls)
    if is_compiled(module_name):
        assert not isinstance(vars(cls)["__init__"], FunctionType)
    # The fields keep their order and defaults: what a positional call relies on.
    init = tree(module_name)
    (node,) = (n for n in ast.walk(init) if isinstance(n, ast.ClassDef) and n.name == name)
    (method,) = (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    # (all of them: ``dataclasses.replace`` passes every field on by name)
    assert [a.arg for a in method.args.args[1:]] == [f.name for f in dataclasses.fields(cls)]
