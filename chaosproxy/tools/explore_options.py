"""``chaosproxy explore``'s command line: its options, their parsers and defaults, and
the budget they give. Apart from :mod:`chaosproxy.tools.explore` so that the
``chaosproxy`` command builds its parser without loading the fault space (every fault,
the scenario model): ``python -m chaosproxy --help`` or ``serve`` starts without it, and
``explore`` loads it when it runs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from chaosproxy.tools.shrink import MAX_TESTS

#: A run of the command, per scenario, killed after this long is ``hung`` (shorter than
#: the matrix's 20 s: every hung run costs it, and the space's own waits are short).
DEFAULT_TIMEOUT = 10.0
DEFAULT_BUDGET = 100


def n_runs(n: int) -> str:
    """``1 run``, ``20 runs``."""
    return f"{n} run" if n == 1 else f"{n} runs"


@dataclass(frozen=True, slots=True)
class Budget:
    """How long to explore: a number of runs, or a time in seconds."""

    runs: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        if self.seconds is not None:
            return _clock(self.seconds)
        return n_runs(self.runs or 0)

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs} if self.seconds is None else {"seconds": self.seconds}


def parse_budget(value: str) -> Budget:
    """``--budget``: a number of runs (``200``), or a duration with a unit (``5m``)."""
    from chaosproxy.server.config import ConfigError, parse_duration

    text = value.strip()
    if text.isdigit():
        if int(text) < 1:
            raise argparse.ArgumentTypeError("a budget of runs must be at least 1")
        return Budget(runs=int(text))
    try:
        seconds = parse_duration(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"expected a number of runs (200) or a duration with a unit (90s, 5m), got {value!r}"
        ) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("a budget of time must be more than 0")
    return Budget(seconds=seconds)


def parse_faults(value: str) -> tuple[str, ...]:
    from chaosproxy.tools.fault_space import explorable  # the space, when --faults is given

    known = explorable()
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            (f"not in the space: {', '.join(unknown)}; " if unknown else "no faults given; ")
            + f"choose from {', '.join(sorted(known))}"
        )
    return names


def parse_runs(value: str) -> tuple[int, ...]:
    """``--replay``: run numbers, comma-separated, from 1."""
    parts = [v.strip() for v in value.split(",") if v.strip()]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected run numbers from 1 (3,17), got {value!r}")
    return tuple(dict.fromkeys(int(p) for p in parts))


def parse_confirm(value: str) -> int:
    """``--confirm``: how many more runs of each minimal scenario, from 0."""
    if not value.isdigit() or int(value) > 100:
        raise argparse.ArgumentTypeError(f"expected a number of runs from 0 to 100, got {value!r}")
    return int(value)


def add_parser(sub: Any) -> None:
    """The ``explore`` subcommand (``chaosproxy/cli/main.py`` calls this)."""
    from chaosproxy.server.config import (
        add_flags,
        argtype,
        parse_positive_int,
        parse_seed,
        show_duration,
    )
    from chaosproxy.tools.matrix import PROXY_FLAGS, add_run_flags

    explore_parser = sub.add_parser(
        "explore",
        help="run a client under random fault mixes and shrink each failure to a minimal scenario",
        description="Run CMD under seeded random fault mixes, judge each run by the verdicts, "
        "shrink every silent_corruption, false_alarm or hung to the smallest scenario that "
        "still fails, and write each to DIR/found/ with explore.json, explore.md and "
        "report.html (docs/explore.md).",
    )
    add_run_flags(
        explore_parser,
        {
            "--client": {
                "help": "shell command of the client, as for chaosproxy matrix: it reads "
                "CHAOSPROXY_URL, prints its final text on stdout and exits non-zero when its "
                "client raised"
            }
        },
    )
    explore_parser.add_argument(
        "--budget",
        type=parse_budget,
        default=Budget(runs=DEFAULT_BUDGET),
        metavar="N|DURATION",
        help=f"how many runs to draw (default {DEFAULT_BUDGET}), or for how long (5m); "
        "shrinking comes after",
    )
    explore_parser.add_argument(
        "--seed",
        type=argtype(parse_seed),
        default=None,
        metavar="N",
        help="the seed of the exploration (default random, printed): the same seed, client "
        "and upstream draw the same runs",
    )
    explore_parser.add_argument(
        "--replay",
        type=parse_runs,
        default=(),
        metavar="K,...",
        help="run only these runs of --seed (run K drawn as in the whole exploration), "
        "whatever the budget, and shrink what fails",
    )
    explore_parser.add_argument(
        "--faults",
        type=parse_faults,
        default=(),
        metavar="K,...",
        help="draw only these faults (comma-separated; default every fault of the space "
        "that fits the stream)",
    )
    add_run_flags(explore_parser, {"--jobs": {}})
    add_flags(explore_parser, ["upstream"], PROXY_FLAGS)
    add_run_flags(
        explore_parser,
        {
            "--out": {
                "default": "chaos-explore",
                "help": "directory for found/, explore.json, explore.md and report.html "
                "(default: chaos-explore)",
            },
            "--timeout": {
                "default": DEFAULT_TIMEOUT,
                "help": "per run, from the command's first request: a command still running "
                f"then is killed and judged hung (default {show_duration(DEFAULT_TIMEOUT)})",
            },
            "--startup-timeout": {},
            "--fail-on": {
                "help": "comma-separated verdicts that, found, make the exit status 1 (default: "
                "silent_corruption,false_alarm,hung; '' never)"
            },
        },
    )
    explore_parser.add_argument(
        "--shrink-runs",
        type=argtype(parse_positive_int),
        default=MAX_TESTS,
        metavar="N",
        help=f"the most candidates tried while shrinking one failure (default {MAX_TESTS})",
    )
    explore_parser.add_argument(
        "--confirm",
        type=parse_confirm,
        default=1,
        metavar="N",
        help="run each minimal scenario this many more times; one that does not give the "
        "same failure every time is flaky, written to flaky/ (default 1)",
    )
    add_flags(explore_parser, ["mock_interval"], PROXY_FLAGS)


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_TIMEOUT",
    "Budget",
    "add_parser",
    "parse_budget",
    "parse_confirm",
    "parse_faults",
    "parse_runs",
]
