"""Every frame-log line the test suite produces validates against the shipped schema.

A pytest plugin (tests/conftest.py loads it). At the start of a run it points
``CHAOSPROXY_LOG_COPY`` (:data:`chaosproxy.observe.logs.COPY_ENV`) at a fresh directory: every
frame log made then, in this process, in pytest-xdist's workers and in the proxies the
tests start as subprocesses (``serve --log FILE`` and all: they inherit the
environment), copies each line it logs, whatever its level, to ``<pid>.jsonl`` there.
At the end of the run (in the controller only, once every worker has finished) each
line is validated against ``chaosproxy/schemas/log.schema.json``; the first invalid one
fails the run, with its file, line and reason.

``-p no:logcheck`` turns it off (``pytest -p no:logcheck``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema_rs
import orjson
import pytest

from chaosproxy.observe.logs import COPY_ENV
from chaosproxy.tools.schema import shipped

_DIRECTORY = pytest.StashKey[Path]()
#: The variable's value before the run (a run inside a run: pytester), put back after.
_BEFORE = pytest.StashKey[str | None]()
#: What the check found (its message, and whether it failed), said in the summary.
_MESSAGE = pytest.StashKey[tuple[str, bool]]()


@dataclass(frozen=True)
class Invalid:
    """The first line that does not validate."""

    path: Path
    line_number: int
    line: str
    reason: str

    def __str__(self) -> str:
        return (
            f"frame-log line {self.path.name}:{self.line_number} does not validate against "
            f"chaosproxy/schemas/log.schema.json: {self.reason}\n  {self.line[:2000]}"
        )


class LineValidator:
    """The shipped log schema, and one validator per line kind (the schema's
    ``discriminator``), so that a reason names the key at fault."""

    def __init__(self) -> None:
        schema = shipped("log")
        cls: Any = jsonschema.validators.validator_for(schema)
        self._whole = cls(schema)
        definitions = {"$schema": schema["$schema"], "$defs": schema["$defs"]}
        self._kinds = {
            kind: cls({**definitions, "$ref": ref})
            for kind, ref in schema["discriminator"]["mapping"].items()
        }

    def reason(self, line: Any) -> str | None:
        """Why ``line`` (parsed) is invalid; None when it is valid."""
        kind = line.get("event") if isinstance(line, dict) else None
        check = self._kinds.get(kind, self._whole) if isinstance(kind, str) else self._whole
        error = jsonschema.exceptions.best_match(check.iter_errors(line))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "the line"
        return f"{kind or 'a line'}: {where}: {error.message}"


def invalid_lines(directory: Path) -> Iterator[Invalid]:
    """Every line of the copies in ``directory`` that does not validate, in order.

    Each line is checked by jsonschema-rs (half a microsecond a line: a run of the
    suite logs some 400,000), and one that fails is checked again by jsonschema, whose
    ``best_match`` says why in the terms of the line's kind."""
    fast = jsonschema_rs.validator_for(shipped("log"))
    check: LineValidator | None = None
    for path in sorted(directory.glob("*.jsonl")):
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, 1):
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    reason: str = f"not JSON: {exc}"
                else:
                    if fast.is_valid(line):
                        continue
                    check = check or LineValidator()
                    reason = check.reason(line) or "invalid (jsonschema-rs; jsonschema: valid)"
                text = raw.decode("utf-8", "replace").rstrip("\n")
                yield Invalid(path, number, text, reason)


def count_lines(directory: Path) -> int:
    total = 0
    for path in directory.glob("*.jsonl"):
        with path.open("rb") as lines:
            total += sum(1 for _ in lines)
    return total


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # (a pytest-xdist worker)


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        return  # the controller's directory, inherited with its environment
    directory = Path(tempfile.mkdtemp(prefix="chaosproxy-logcheck-"))
    config.stash[_DIRECTORY] = directory
    config.stash[_BEFORE] = os.environ.get(COPY_ENV)
    os.environ[COPY_ENV] = str(directory)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    directory = config.stash.get(_DIRECTORY, None)
    if directory is None:
        return
    del config.stash[_DIRECTORY]
    before = config.stash.get(_BEFORE, None)
    if before is None:
        os.environ.pop(COPY_ENV, None)
    else:
        os.environ[COPY_ENV] = before
    invalid = next(invalid_lines(directory), None)
    if invalid is None:
        count = count_lines(directory)
        shutil.rmtree(directory, ignore_errors=True)
        config.stash[_MESSAGE] = (f"logcheck: {count} frame-log lines valid", False)
        return
    config.stash[_MESSAGE] = (f"logcheck: {invalid} (all copies kept in {directory})", True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The verdict, said in the summary: on a line of its own (under pytest-xdist the
    progress line is not ended before the session's end)."""
    message = terminalreporter.config.stash.get(_MESSAGE, None)
    if message is not None:
        del terminalreporter.config.stash[_MESSAGE]
        terminalreporter.write_line(message[0], red=message[1])


def pytest_unconfigure(config: pytest.Config) -> None:
    message = config.stash.get(_MESSAGE, None)  # (no summary was shown)
    if message is not None:
        print(message[0])
