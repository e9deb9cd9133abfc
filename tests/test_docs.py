"""The docs are self-contained and stay so.

- every relative link in README.md and docs/*.md points at a file that exists, and a
  ``#anchor`` at a heading of that file;
- nothing in docs/, README.md or chaosproxy/ refers to DESIGN.md, which is not in the
  repository: the rules users rely on are written in the docs themselves;
- docs/scenarios.md has a "## Selectors" section that names every field of
  ``SelectorConfig`` (so a new selector without docs fails) and a "## Kinds" section that
  names every kind and every provider profile; the YAML examples there are valid;
- a default the docs give for a setting (or the mock's, the matrix's) is the code's;
- docs/scenarios.md's table of faults is the fault registry's declarations, row for row.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from chaosproxy.core.faults import registry
from chaosproxy.core.faults.base import SelectorConfig
from chaosproxy.core.providers import KINDS, PROVIDER_NAMES
from chaosproxy.scenario import parse_scenario
from chaosproxy.server.config import ConfigError, Flag, flags
from tests.support.repo import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
MARKDOWN = [REPO / "README.md", *DOCS]
PACKAGE_FILES = sorted(
    p
    for p in (REPO / "chaosproxy").rglob("*")
    if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".yml", ".txt", ".toml"}
)

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
#: ``[text](target)`` and ``![alt](target)``, the text possibly holding ``[…]`` and
#: newlines; an optional title after the target.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
#: ``[label]: target`` reference definitions.
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$", re.MULTILINE)
DESIGN_REF = re.compile(r"\bDESIGN(?:\.md\b|\s*§|\s+section\b)")


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def without_code(text: str) -> str:
    """The text with fenced code blocks and code spans blanked (newlines kept, so
    line numbers stay right)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return CODE_SPAN.sub(blank, FENCE.sub(blank, text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation
    dropped (but ``-`` and ``_``), each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in "-_ " or unicodedata.category(ch)[0] in "LNM":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor the headings of ``path`` define (GitHub numbers repeats ``-1``, …)."""
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path`` outside code."""
    text = without_code(path.read_text(encoding="utf-8"))
    found = [(m.start(1), m.group(1)) for m in INLINE_LINK.finditer(text)]
    found += [(m.start(1), m.group(1)) for m in REFERENCE_DEF.finditer(text)]
    return sorted((text.count("\n", 0, start) + 1, target) for start, target in found)


def is_external(target: str) -> bool:
    return bool(re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target)) or target.startswith("//")


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a level-2 heading line), up to the next level-2
    heading; AssertionError when the heading is missing."""
    body = FENCE.sub("", text)
    m = re.search(rf"^{re.escape(heading)}[ \t]*$", body, re.MULTILINE)
    assert m is not None, f"docs/scenarios.md has no {heading!r} heading"
    end = re.search(r"^## ", body[m.end() :], re.MULTILINE)
    return body[m.end() : m.end() + end.start()] if end else body[m.end() :]


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("doc", MARKDOWN, ids=rel)
def test_relative_links_point_at_files_and_headings_that_exist(doc: Path) -> None:
    broken = []
    for line, target in links(doc):
        if not target or is_external(target):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = path_part.split("?", 1)[0]
        dest = (doc.parent / path_part).resolve() if path_part else doc
        where = f"{rel(doc)}:{line}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif (
            anchor
            and dest.is_file()
            and dest.suffix == ".md"
            and anchor.lower() not in anchors(dest)
        ):
            broken.append(f"{where}: no heading with this anchor in {rel(dest)}")
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_links_and_anchors() -> None:
    """The checker itself: links across lines and with code in their text are found,
    code is not, and anchors follow GitHub's rules."""
    assert slug("`response_end` — exactly one per request") == (
        "response_end--exactly-one-per-request"
    )
    assert slug("Auto-detection (`provider: auto`)") == "auto-detection-provider-auto"
    assert slug("Staging mixes: `rate`") == "staging-mixes-rate"
    text = "see [Clients, in\ndetail](#clients-in-detail), [`x`](a.md#b)\n`[no](c.md)`\n"
    text += "```\n[no](d.md)\n```\n"
    found = [m.group(1) for m in INLINE_LINK.finditer(without_code(text))]
    assert found == ["#clients-in-detail", "a.md#b"]


# --------------------------------------------------------------------------- no DESIGN.md


@pytest.mark.parametrize("path", [*MARKDOWN, *PACKAGE_FILES], ids=rel)
def test_nothing_refers_to_design_md(path: Path) -> None:
    """DESIGN.md is not in the repository: a rule must be written in the docs and
    referred to there (e.g. "docs/scenarios.md, Selectors")."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [
        f"{rel(path)}:{n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if DESIGN_REF.search(line)
    ]
    assert not found, "\n".join(found)


# --------------------------------------------------------------------------- selectors, kinds


def test_scenarios_md_documents_every_selector() -> None:
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    selectors = section(text, "## Selectors")
    fields = list(SelectorConfig.model_fields)
    assert fields, "SelectorConfig has no fields?"
    undocumented = [f for f in fields if f"`{f}`" not in selectors]
    assert not undocumented, f"selectors missing from docs/scenarios.md, Selectors: {undocumented}"


def test_scenarios_md_documents_every_kind_and_provider() -> None:
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    kinds = section(text, "## Kinds")
    missing = [k for k in KINDS if f"`{k}`" not in kinds]
    missing += [p for p in PROVIDER_NAMES if p not in kinds]
    assert not missing, f"missing from docs/scenarios.md, Kinds: {missing}"


def test_the_selector_and_kind_examples_are_valid_scenarios() -> None:
    """Every ``yaml`` block under Selectors and Kinds loads as a scenario."""
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    blocks = []
    for heading in ("## Selectors", "## Kinds"):
        start = text.index(f"\n{heading}\n")
        end = text.find("\n## ", start + len(heading) + 2)
        blocks += re.findall(r"```yaml\n(.*?)```", text[start:end], re.DOTALL)
    assert blocks
    for n, block in enumerate(blocks):
        parse_scenario(block, f"docs/scenarios.md yaml block {n}", default_name=f"doc-{n}")


# ------------------------------------------------------------------------- faults

#: How the table says what body a fault acts on.
BODIES = {"any": "any", "framed": "sse, ndjson", "sse": "sse", "websocket": "websocket"}


def fault_table() -> str:
    """docs/scenarios.md's table of faults, as the registry's declarations give it."""
    rows = [
        "| fault | stage | body | keeps the answer | explore draws it | example |",
        "|---|---|---|---|---|---|",
    ]
    for name, cls in sorted(registry().items()):
        said = cls.declaration
        doc = {"event": "faults-event.md", "websocket": "faults-websocket.md"}.get(
            cls.stage, "faults-transport.md"
        )
        drawn = "no" if said.explore is None else "yes"
        if said.explore is not None and said.explore.endless:
            drawn = "timed clients only"
        rows.append(
            f"| [`{name}`]({doc}#{name}) | {cls.stage} | {BODIES[said.needs]} "
            f"| {'yes' if said.keeps_answer else 'no'} | {drawn} | `{said.example}` |"
        )
    return "\n".join(rows) + "\n"


def test_the_fault_table_is_the_registrys() -> None:
    """Between its markers, the table is what each fault's file declares: a fault added,
    removed or declared otherwise changes it (paste the expected table in)."""
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    table = text.split("<!-- faults:registry -->\n")[1].split("<!-- /faults:registry -->")[0]
    assert table == fault_table(), "docs/scenarios.md's fault table should be:\n" + fault_table()


# ------------------------------------------------------------------------- defaults


#: How the docs say a setting has no value by default.
NO_VALUE = frozenset({"none", "off", "the system store"})


def _parsed(flag: Flag, text: str) -> object:
    value = flag.parse(text)
    return (value,) if flag.kind == "append" else value


def test_the_docs_tell_each_settings_default() -> None:
    """Where the docs give a ``serve`` flag's default (a table row ``| `--flag` |
    default |``, ``default **X**`` after the flag and its variable, or ``(X)`` right
    after the flag), the flag's own parser reads it back as the Config default. Cells
    that are words (none, off, random) are not values and are passed over."""
    told: list[str] = []
    wrong: list[str] = []
    for path in MARKDOWN:
        text = path.read_text(encoding="utf-8")
        for _, flag, default in flags():
            name = re.escape(flag.name)
            found = [
                *re.findall(rf"^\| `{name}(?: [^`]*)?` \| `?([^|`]+?)`? \|", text, re.MULTILINE),
                *re.findall(rf"`{name}` \(`CHAOSPROXY_\w+`\),? default \*\*([^*]+)\*\*", text),
                *re.findall(rf"`{name}` \(([^)`]+)\)", text),
            ]
            for shown in found:
                if default in (None, False) and shown.strip() in NO_VALUE:
                    continue
                try:
                    value = _parsed(flag, shown.strip())
                except ConfigError:
                    continue
                told.append(f"{path.name}: {flag.name} {shown}")
                if value != default:
                    wrong.append(
                        f"{path.name}: {flag.name} {shown!r}, but the default is {default!r}"
                    )
    assert wrong == []
    assert len(told) >= 15, told


def test_the_docs_tell_the_mocks_and_the_matrixs_defaults() -> None:
    from chaosproxy.core.mock_defaults import DEFAULT_INTERVAL, DEFAULT_TOKENS
    from chaosproxy.server.config import show_duration
    from chaosproxy.tools import explore, matrix

    mock = (REPO / "docs" / "mock.md").read_text(encoding="utf-8")
    assert f"| tokens | `create_mock_app(tokens={DEFAULT_TOKENS})` |" in mock
    assert f"| interval | `create_mock_app(interval={DEFAULT_INTERVAL})` (seconds) |" in mock
    matrix_timeout = f"[--timeout {show_duration(matrix.DEFAULT_TIMEOUT)}]"
    for path in (REPO / "README.md", REPO / "docs" / "verdicts.md"):
        assert re.findall(r"\[--timeout [^\]]+\]", path.read_text(encoding="utf-8"))[0] == (
            matrix_timeout
        ), path.name
    explore_doc = (REPO / "docs" / "explore.md").read_text(encoding="utf-8")
    explore_timeout = show_duration(explore.DEFAULT_TIMEOUT)
    assert f"[--timeout {explore_timeout}]" in explore_doc
    assert f"`--timeout` (default `{explore_timeout}`" in explore_doc
    # The start-up allowance, the same for both.
    startup = show_duration(matrix.DEFAULT_STARTUP)
    for path in (REPO / "README.md", REPO / "docs" / "verdicts.md", REPO / "docs" / "explore.md"):
        assert f"[--startup-timeout {startup}]" in path.read_text(encoding="utf-8"), path.name
    assert f"`--startup-timeout` (default `{startup}`" in explore_doc
