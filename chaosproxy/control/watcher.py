"""``--scenarios`` watched: a changed, added or removed scenario file applies without a
restart (docs/scenarios.md, Watched files).

Every ``--scenarios-poll`` (1 s by default) the files' stamp is taken in a thread
(:mod:`chaosproxy.scenario.watch`: a few ``stat`` calls); when it moved, every file is
read again and validated. A valid set is applied (``apply``: the proxy's scenario set
rebased on it, or, under ``serve --workers N``, the supervisor's and every worker's)
and a notice says what changed; a set with a problem is not applied at all: the
previous scenarios stay, and each problem is a warning line with its ``FILE:LINE``. A
file caught half-written is such a problem, and its next write another change.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from chaosproxy.observe.logs import redact_text
from chaosproxy.scenario import Scenario
from chaosproxy.scenario.selection import Rebased
from chaosproxy.scenario.watch import ScenarioFiles

#: What applies a valid set of the files' scenarios (in load order, without the
#: built-in library), and what it changed.
Apply = Callable[[dict[str, Scenario]], Awaitable[Rebased]]
#: One line on stderr: (``notice`` or ``warning``, the message).
Say = Callable[[str, str], None]


def _stderr_line(kind: str, message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"chaosproxy: {kind}: {redact_text(message)}", file=sys.stderr, flush=True)


def reload_notice(rebased: Rebased, default_lost: str | None = None) -> str:
    """The notice of an applied change."""
    parts = []
    if rebased.changed:
        parts.append("added or changed " + ", ".join(rebased.changed))
    if rebased.removed:
        parts.append("removed " + ", ".join(rebased.removed))
    said = "; ".join(parts) or "nothing to change (each is as it was, or set at run time)"
    if default_lost is not None:
        said += f"; the default {default_lost!r} is gone: requests that choose none pass through"
    return f"scenario files reloaded: {said}"


class ScenarioWatcher:
    """Polls the scenario files of ``paths`` every ``interval`` seconds and applies
    each valid change (:meth:`start`, :meth:`stop`)."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        interval: float,
        apply: Apply,
        *,
        say: Say = _stderr_line,
        default: Callable[[], str | None] = lambda: None,
        files: ScenarioFiles | None = None,
    ) -> None:
        #: The files (``files``: as they were looked at before the scenarios were
        #: loaded, so that a change while the proxy starts is one too).
        self.files = files if files is not None else ScenarioFiles(paths)
        self.interval = interval
        self._apply = apply
        self._say = say
        self._default = default
        self._task: asyncio.Task[None] | None = None
        #: Changes applied, and changes refused (a problem in the files), so far.
        self.applied = 0
        self.refused = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception as exc:  # (a bug: say it, and go on watching)
                self._say("warning", f"scenario files not reloaded: {type(exc).__name__}: {exc}")

    async def check(self) -> bool:
        """Look once; apply the files if they changed and are valid. Whether a change
        was applied."""
        files = self.files
        if not await asyncio.to_thread(files.changed):
            return False
        scenarios, problems = await asyncio.to_thread(files.load)
        if problems:
            self.refused += 1
            for problem in problems:
                self._say(
                    "warning",
                    f"scenario files not reloaded, the previous scenarios stay: {problem}",
                )
            return False
        before = self._default()
        rebased = await self._apply(scenarios)
        self.applied += 1
        lost = before if before is not None and before in rebased.removed else None
        self._say("notice", reload_notice(rebased, lost))
        return True


__all__ = ["Apply", "Say", "ScenarioWatcher", "reload_notice"]
