"""Choosing the scenario and the seed of a request (docs/scenarios.md)."""

from __future__ import annotations

import hashlib
import random
import threading

import pytest
from multidict import CIMultiDict

from chaosproxy.scenario import Scenario, ScenarioError, parse_scenario
from chaosproxy.scenario.selection import (
    Choice,
    Chooser,
    Rebased,
    ScenarioSet,
    UnknownScenario,
    derive_seed,
)

CHAT = "/v1/chat/completions"


def scenario(name: str, extra: str = "") -> Scenario:
    return parse_scenario(f"name: {name}\n{extra}\nfaults:\n  - rechunk: {{size: 1}}\n", name)


@pytest.fixture
def library() -> dict[str, Scenario]:
    return {
        s.name: s
        for s in [
            scenario("plain"),
            scenario("chat-post", "match: {method: POST, path: /v1/chat/*}"),
            scenario("any-chat", "match: {path: /v1/chat/*}"),
            scenario("tenant", "match: {headers: {X-Tenant: blue-*}}"),
            scenario("seeded", "seed: 42"),
            scenario("first-only", "requests: [1]"),
            scenario("second-and-fourth", "requests: [2, 4]"),
        ]
    }


def names(choice: Choice) -> str | None:
    return choice.scenario.name if choice.scenario else None


# --------------------------------------------------------------------------- order


def test_header_wins_over_everything(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, default="seeded", base_seed=1)
    c = chosen.choose("POST", "/_chaos/plain" + CHAT, {"x-chaos-scenario": "tenant"})
    assert names(c) == "tenant"
    assert c.path == CHAT  # the prefix is removed even when the header decided


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Chaos-Scenario": "plain"},
        {"x-chaos-scenario": "plain"},
        {"X-CHAOS-SCENARIO": " plain "},
        CIMultiDict([("X-Chaos-Scenario", "plain")]),
    ],
)
def test_header_names_are_case_insensitive(
    library: dict[str, Scenario], headers: dict[str, str]
) -> None:
    c = ScenarioSet(library).choose("GET", "/v1/models", headers)
    assert (names(c), c.active, c.ordinal, c.path) == ("plain", True, 1, "/v1/models")


def test_path_prefix_wins_over_match_and_default(library: dict[str, Scenario]) -> None:
    c = ScenarioSet(library, default="seeded").choose("POST", f"/_chaos/plain{CHAT}", {})
    assert (names(c), c.path) == ("plain", CHAT)


@pytest.mark.parametrize(
    ("path_qs", "forwarded"),
    [
        (f"/_chaos/plain{CHAT}?x=1&y=/a", f"{CHAT}?x=1&y=/a"),
        ("/_chaos/plain", "/"),
        ("/_chaos/plain/", "/"),
        ("/_chaos/plain?stream=1", "/?stream=1"),
        ("/_chaos/pl%61in/api/chat", "/api/chat"),
    ],
)
def test_path_prefix_is_removed(library: dict[str, Scenario], path_qs: str, forwarded: str) -> None:
    c = ScenarioSet(library).choose("GET", path_qs, {})
    assert (names(c), c.path) == ("plain", forwarded)


def test_first_matching_scenario_in_load_order(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, default="plain")
    assert names(chosen.choose("POST", CHAT + "?a=1", {})) == "chat-post"
    assert names(chosen.choose("get", CHAT, {})) == "any-chat"
    # Reordering the library changes which rule is tried first.
    reordered = ScenarioSet({k: library[k] for k in ["any-chat", "chat-post"]})
    assert names(reordered.choose("POST", CHAT, {})) == "any-chat"


def test_match_on_headers(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library)
    assert names(chosen.choose("GET", "/v1/models", {"x-tenant": "blue-7"})) == "tenant"
    multi = CIMultiDict([("X-Tenant", "red"), ("X-TENANT", "blue-1")])
    assert names(chosen.choose("GET", "/v1/models", multi)) == "tenant"
    assert names(chosen.choose("GET", "/v1/models", {"x-tenant": "red"})) is None


def test_default_then_passthrough(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, default="seeded")
    c = chosen.choose("GET", "/v1/models?x", {})
    assert (names(c), c.active, c.ordinal, c.path) == ("seeded", True, 1, "/v1/models?x")
    chosen.set_default(None)
    c = chosen.choose("GET", "/v1/models", {})
    assert (c.scenario, c.active, c.ordinal, c.path) == (None, False, 0, "/v1/models")


def test_empty_set_is_passthrough() -> None:
    c = ScenarioSet().choose("POST", "/_chaosx/v1", {"X-Chaos-Scenario": ""})
    assert (c.scenario, c.active, c.ordinal, c.path) == (None, False, 0, "/_chaosx/v1")


# --------------------------------------------------------------------------- unknown names


def test_unknown_names(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, base_seed=5)
    with pytest.raises(UnknownScenario) as info:
        chosen.choose("GET", "/", {"X-Chaos-Scenario": "plian"})
    assert info.value.name == "plian"
    assert str(info.value) == "unknown scenario 'plian' (did you mean 'plain'?)"
    with pytest.raises(UnknownScenario) as info:
        chosen.choose("GET", "/_chaos/nope/v1/models", {})
    assert str(info.value) == "unknown scenario 'nope'"
    with pytest.raises(UnknownScenario) as info:
        chosen.choose("GET", "/_chaos//v1", {})
    assert info.value.name == ""
    # Refused requests are not counted: the next one is still the first.
    c = chosen.choose("GET", "/", {"X-Chaos-Scenario": "first-only"})
    assert (c.ordinal, c.active, c.seed) == (1, True, derive_seed(5, 1))


def test_unknown_default(library: dict[str, Scenario]) -> None:
    with pytest.raises(UnknownScenario):
        ScenarioSet(library, default="missing")
    chosen = ScenarioSet(library)
    with pytest.raises(UnknownScenario):
        chosen.set_default("missing")
    with pytest.raises(UnknownScenario):
        chosen.remove("missing")


# --------------------------------------------------------------------------- seeds


def test_seed_from_the_header_first(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, base_seed=9)
    headers = {"X-Chaos-Scenario": "seeded", "x-chaos-seed": "7"}
    assert chosen.choose("GET", "/", headers).seed == 7
    assert chosen.choose("GET", "/", {"X-Chaos-Seed": "0"}).seed == 0


def test_seed_from_the_scenario(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, base_seed=9)
    assert chosen.choose("GET", "/_chaos/seeded/", {}).seed == library["seeded"].seed == 42


def test_derived_seeds(library: dict[str, Scenario]) -> None:
    def expected(n: int) -> int:
        digest = hashlib.sha256(f"1234:{n}".encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 11

    a = ScenarioSet(library, base_seed=1234)
    b = ScenarioSet(library, base_seed=1234)
    # Every request counts, whatever decided its seed.
    seeds = [
        a.choose("GET", "/", {}).seed,
        a.choose("GET", "/", {"X-Chaos-Seed": "3"}).seed,
        a.choose("GET", "/_chaos/seeded/", {}).seed,
        a.choose("GET", "/_chaos/plain/", {}).seed,
    ]
    assert seeds == [expected(1), 3, 42, expected(4)]
    assert [b.choose("GET", "/", {}).seed for _ in range(4)] == [expected(n) for n in range(1, 5)]
    assert all(0 <= expected(n) < 2**53 for n in range(1, 5))
    a.reset()
    assert a.choose("GET", "/", {}).seed == expected(1)
    assert ScenarioSet(base_seed=1235).choose("GET", "/", {}).seed != expected(1)


def test_random_seed_without_a_base_seed(
    library: dict[str, Scenario], monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = ScenarioSet(library)
    monkeypatch.setattr(chosen, "_random", random.Random(99))
    twin = random.Random(99)
    assert [chosen.choose("GET", "/", {}).seed for _ in range(3)] == [
        twin.randrange(2**53) for _ in range(3)
    ]
    unpatched = ScenarioSet().choose("GET", "/", {}).seed
    assert isinstance(unpatched, int) and 0 <= unpatched < 2**53


@pytest.mark.parametrize(
    "bad", ["abc", "-1", "1.5", "+3", "1_000", "0x10", "١٢", "9223372036854775808"]
)
def test_bad_seed_header(library: dict[str, Scenario], bad: str) -> None:
    chosen = ScenarioSet(library, base_seed=1)
    with pytest.raises(ValueError, match=r"X-Chaos-Seed must be a decimal integer from 0 to "):
        chosen.choose("GET", "/", {"X-Chaos-Seed": bad})
    assert chosen.choose("GET", "/", {}).seed == derive_seed(1, 1)  # not counted


def test_largest_seed_header(library: dict[str, Scenario]) -> None:
    c = ScenarioSet(library).choose("GET", "/", {"X-Chaos-Seed": str(2**63 - 1)})
    assert c.seed == 2**63 - 1


# --------------------------------------------------------------------------- ordinals


def test_requests_first_only(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, base_seed=3)
    got = [chosen.choose("POST", "/_chaos/first-only/x", {}) for _ in range(3)]
    assert [(names(c), c.active, c.ordinal) for c in got] == [
        ("first-only", True, 1),
        ("first-only", False, 2),
        ("first-only", False, 3),
    ]
    assert [c.seed for c in got] == [derive_seed(3, n) for n in (1, 2, 3)]


def test_ordinals_are_counted_per_scenario(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, default="second-and-fourth")
    got = []
    for _ in range(2):
        got.append(chosen.choose("GET", "/", {}))
        got.append(chosen.choose("GET", "/", {"X-Chaos-Scenario": "plain"}))
    got.append(chosen.choose("GET", "/", {}))
    got.append(chosen.choose("GET", "/", {}))
    got.append(chosen.choose("GET", "/", {}))
    summary = [(names(c), c.ordinal, c.active) for c in got]
    assert summary == [
        ("second-and-fourth", 1, False),
        ("plain", 1, True),
        ("second-and-fourth", 2, True),
        ("plain", 2, True),
        ("second-and-fourth", 3, False),
        ("second-and-fourth", 4, True),
        ("second-and-fourth", 5, False),
    ]
    chosen.reset()
    assert chosen.choose("GET", "/", {}).ordinal == 1


# --------------------------------------------------------------------------- changes


def test_add_replace_remove(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, default="first-only")
    assert chosen.choose("GET", "/", {}).active
    assert not chosen.choose("GET", "/", {}).active
    chosen.add(scenario("first-only", "requests: [1]\ndescription: again"))
    c = chosen.choose("GET", "/", {})
    assert (c.active, c.ordinal) == (True, 1)  # a replaced scenario starts counting again
    assert c.scenario is not None and c.scenario.description == "again"
    assert list(chosen.scenarios).index("first-only") == list(library).index("first-only")

    chosen.add(scenario("late", "match: {path: /late}"))
    assert list(chosen.scenarios)[-1] == "late"
    assert names(chosen.choose("GET", "/late?q", {})) == "late"

    chosen.remove("first-only")
    assert chosen.default is None
    assert "first-only" not in chosen.scenarios
    assert chosen.choose("GET", "/", {}).scenario is None


def test_scenarios_view_is_read_only(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library)
    with pytest.raises(TypeError):
        chosen.scenarios["x"] = library["plain"]  # type: ignore[index]
    library.clear()  # the set keeps its own copy
    assert len(chosen.scenarios) == 7


def test_none_selects_passthrough_over_a_default() -> None:
    scenarios = {"dup": parse_scenario("faults: []", "<dup>", default_name="dup")}
    chooser = ScenarioSet(scenarios, default="dup")
    assert chooser.choose("GET", "/v1/x", {"X-Chaos-Scenario": "none"}).scenario is None
    via_prefix = chooser.choose("GET", "/_chaos/none/v1/x", {})
    assert via_prefix.scenario is None
    assert via_prefix.path == "/v1/x"
    assert chooser.choose("GET", "/v1/x", {}).scenario is scenarios["dup"]


def test_none_is_a_reserved_scenario_name() -> None:
    with pytest.raises(ScenarioError, match="'none' is reserved"):
        parse_scenario("name: none\nfaults: []", "<x>")


# --------------------------------------------------------------------------- rate


def staging_mix(seed: int | None) -> ScenarioSet:
    mix = {
        "cut": scenario("cut", 'match: {path: "/v1/*"}\nrate: 0.05'),
        "dup": scenario("dup", 'match: {path: "/v1/*"}\nrate: 0.02'),
        "slow": scenario("slow", "rate: 0.10"),
    }
    return ScenarioSet(mix, default="slow", base_seed=seed)


def split(chooser: ScenarioSet, n: int, path: str = "/v1/chat/completions") -> list[str | None]:
    return [names(chooser.choose("POST", path, {})) for _ in range(n)]


def test_rates_split_ten_thousand_requests_as_configured() -> None:
    picks = split(staging_mix(seed=7), 10_000)
    share = {name: picks.count(name) / len(picks) for name in ("cut", "dup", "slow", None)}
    # One draw per request laid along the rules it matches: 5 %, 2 %, then the default's
    # 10 %, the rest clean (a binomial spread of ±0.7 % at 3 sigma for 10 %).
    assert share["cut"] == pytest.approx(0.05, abs=0.007)
    assert share["dup"] == pytest.approx(0.02, abs=0.005)
    assert share["slow"] == pytest.approx(0.10, abs=0.009)
    assert share[None] == pytest.approx(0.83, abs=0.012)


def test_the_same_seed_gives_the_same_split_and_another_seed_another() -> None:
    first = split(staging_mix(seed=7), 2_000)
    assert split(staging_mix(seed=7), 2_000) == first
    assert split(staging_mix(seed=8), 2_000) != first


def test_a_request_the_rate_passes_over_falls_through() -> None:
    chooser = staging_mix(seed=7)
    picks = split(chooser, 3_000, path="/other")  # only the default's rule applies here
    assert set(picks) == {"slow", None}
    assert picks.count("slow") / len(picks) == pytest.approx(0.10, abs=0.017)
    # Ordinals count only the requests a scenario took.
    assert chooser.choose("POST", "/x", {"X-Chaos-Scenario": "slow"}).ordinal == (
        picks.count("slow") + 1
    )


def test_an_explicit_choice_ignores_rate_and_the_seed_header_decides_the_draw() -> None:
    chooser = staging_mix(seed=None)
    zero = scenario("never", 'match: {path: "/v1/*"}\nrate: 0')
    chooser.add(zero)
    for _ in range(200):
        assert names(chooser.choose("GET", "/x", {"X-Chaos-Scenario": "never"})) == "never"
    with_header = [
        names(chooser.choose("POST", "/v1/x", {"X-Chaos-Seed": str(i % 50)})) for i in range(400)
    ]
    assert with_header[:50] * 8 == with_header  # the same header seed, the same draw
    assert "never" not in with_header


def test_rate_is_validated_and_shown() -> None:
    assert scenario("r", "rate: 1").rate == 1.0
    assert scenario("r", "rate: 0.25").as_dict()["rate"] == 0.25
    for bad, message in [
        ("1.5", "must be <= 1"),
        ("-0.1", "must be >= 0"),
        ("yes", "must be a number"),
    ]:
        with pytest.raises(ScenarioError, match=f"^r:2: rate: {message}"):
            scenario("r", f"rate: {bad}")


# --------------------------------------------------------------------------- untrusted clients

#: What a client may send to choose its faults, each alone and all together (on a path
#: no match: rule of the library takes, so only the default applies).
MODELS = "/v1/models"
CLIENT_CHOICES: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
    (MODELS, {"X-Chaos-Scenario": "plain"}, ("header",)),
    (MODELS, {"x-chaos-scenario": "none"}, ("header",)),
    (MODELS, {"X-Chaos-Scenario": "no-such-scenario"}, ("header",)),  # not even refused
    (MODELS, {"X-Chaos-Seed": "42"}, ("seed",)),
    (MODELS, {"X-Chaos-Seed": "9" * 5000}, ("seed",)),  # not even parsed
    (MODELS, {"X-Chaos-Seed": ""}, ("seed",)),
    ("/_chaos/plain" + MODELS, {}, ("path",)),
    ("/_chaos/none/v1/models?x=1", {}, ("path",)),
    (
        "/_chaos/plain" + MODELS,
        {"X-Chaos-Scenario": "first-only", "X-Chaos-Seed": "7"},
        ("header", "seed", "path"),
    ),
    (MODELS, {"X-Mock-Tokens": "100000"}, ("mock",)),
    (MODELS, {"x-mock-interval-ms": "60000", "X-Chaos-Seed": "1"}, ("seed", "mock")),
]


@pytest.mark.parametrize(("path_qs", "headers", "ignored"), CLIENT_CHOICES)
def test_an_untrusted_client_chooses_nothing(
    library: dict[str, Scenario], path_qs: str, headers: dict[str, str], ignored: tuple[str, ...]
) -> None:
    chosen = ScenarioSet(library, default="seeded", base_seed=3, trust_client=False)
    c = chosen.choose("GET", path_qs, headers)
    assert (names(c), c.active, c.ordinal, c.seed) == ("seeded", True, 1, 42)  # its seed:
    assert c.path == path_qs  # forwarded as the client sent it: the proxy reads no prefix
    assert c.ignored == ignored
    plain = ScenarioSet(library, default="plain", base_seed=3, trust_client=False)
    c = plain.choose("GET", path_qs, headers)
    assert (names(c), c.seed, c.ignored) == ("plain", derive_seed(3, 1), ignored)


def test_a_trusted_client_is_not_said_to_be_ignored(library: dict[str, Scenario]) -> None:
    c = ScenarioSet(library).choose("GET", "/_chaos/plain/x", {"X-Chaos-Seed": "1"})
    assert (names(c), c.seed, c.ignored) == ("plain", 1, ())
    c = ScenarioSet(library, trust_client=False).choose("GET", "/x", {"X-Other": "1"})
    assert (c.scenario, c.ignored) == (None, ())


def test_untrusted_the_rate_draw_and_the_seeds_come_from_the_base_seed_alone() -> None:
    """The audit: one X-Chaos-Seed picked the cut 5 times of 5. Untrusted, a request's
    draw and seed depend on its number alone, whatever it sends."""
    asking = staging_mix(seed=7)
    asking.trust_client = False
    quiet = staging_mix(seed=7)
    quiet.trust_client = False
    hostile = [
        ("/v1/chat/completions", {"X-Chaos-Seed": str(i % 3)}) if i % 4 == 0 else
        ("/v1/chat/completions", {"X-Chaos-Scenario": "cut"}) if i % 4 == 1 else
        ("/v1/chat/completions", {"X-Chaos-Scenario": "none"}) if i % 4 == 2 else
        ("/_chaos/cut/v1/chat/completions", {})
        for i in range(2_000)
    ]  # fmt: skip
    got = [asking.choose("POST", p, h) for p, h in hostile]
    want = [quiet.choose("POST", "/v1/chat/completions", {}) for _ in hostile]
    # The prefixed path matches no "/v1/*" rule, so only the default's draw applies to
    # it: it can take no more than a plain request would.
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.seed == w.seed == derive_seed(7, i + 1)
        if hostile[i][0].startswith("/_chaos/"):
            assert names(g) in ("slow", None)
        else:
            assert names(g) == names(w), i
    share = sum(names(g) == "cut" for g in got) / len(got)
    assert share == pytest.approx(0.05 * 3 / 4, abs=0.02)  # the mix's rate, no more


# --------------------------------------------------------------------------- a fleet


class ScriptedFleet:
    """A fleet's counters as :meth:`ScenarioSet.choose_in_fleet` asks them: the calls
    made, in order, answered from a script (None: Redis did not answer in time)."""

    def __init__(self, number: int, ordinal: int, *, away: bool = False) -> None:
        self.number, self.next_ordinal, self.away = number, ordinal, away
        self.calls: list[tuple[str, str | None]] = []

    async def counts(self, scenario: str | None) -> tuple[int, int] | None:
        self.calls.append(("counts", scenario))
        if self.away:
            return None
        return self.number, self.next_ordinal if scenario is not None else 0

    async def ordinal(self, scenario: str) -> int | None:
        self.calls.append(("ordinal", scenario))
        return None if self.away else self.next_ordinal


async def test_a_fleet_numbers_a_named_request_in_one_round_trip(
    library: dict[str, Scenario],
) -> None:
    chooser = ScenarioSet(library, base_seed=9)
    fleet = ScriptedFleet(number=41, ordinal=2)
    choice = await chooser.choose_in_fleet(
        "POST", CHAT, CIMultiDict({"X-Chaos-Scenario": "second-and-fourth"}), fleet
    )
    assert fleet.calls == [("counts", "second-and-fourth")]
    assert (names(choice), choice.ordinal, choice.active) == ("second-and-fourth", 2, True)
    assert choice.seed == derive_seed(9, 41)  # the fleet's number: no salt
    assert not choice.local


async def test_a_rate_drawn_from_the_seed_needs_the_number_first() -> None:
    """``rate`` with a ``--seed``: the draw comes from the fleet's request number, so
    the number is asked before the match, then the chosen scenario's ordinal."""
    rated = {"cut": scenario("cut", 'match: {path: "/v1/*"}\nrate: 0.5')}
    chooser = ScenarioSet(rated, base_seed=3)
    number = next(
        n for n in range(1, 100) if random.Random(f"{derive_seed(3, n)}:rate").random() < 0.5
    )
    fleet = ScriptedFleet(number=number, ordinal=7)
    choice = await chooser.choose_in_fleet("POST", CHAT, CIMultiDict(), fleet)
    assert fleet.calls == [("counts", None), ("ordinal", "cut")]
    assert (names(choice), choice.ordinal, choice.seed) == ("cut", 7, derive_seed(3, number))


async def test_a_fleet_away_numbers_the_request_here_salted_apart(
    library: dict[str, Scenario],
) -> None:
    chooser = ScenarioSet(library, base_seed=9)
    chooser.fallback_salt = "r2"
    fleet = ScriptedFleet(number=41, ordinal=2, away=True)
    headers = CIMultiDict({"X-Chaos-Scenario": "first-only"})
    first = await chooser.choose_in_fleet("POST", CHAT, headers, fleet)
    second = await chooser.choose_in_fleet("POST", CHAT, headers, fleet)
    assert [first.local, second.local] == [True, True]
    assert [first.ordinal, second.ordinal] == [1, 2]  # this replica's own count
    assert [first.active, second.active] == [True, False]
    assert [first.seed, second.seed] == [derive_seed(9, 1, "r2"), derive_seed(9, 2, "r2")]


def test_derived_seeds_with_a_salt_are_another_sequence() -> None:
    assert derive_seed(5, 1, None) == derive_seed(5, 1)
    salted = [derive_seed(5, n, "pod-a") for n in range(1, 50)]
    assert not set(salted) & {derive_seed(5, n) for n in range(1, 50)}
    assert not set(salted) & {derive_seed(5, n, "pod-b") for n in range(1, 50)}


# --------------------------------------------------------------------------- rebase


def test_rebase_follows_the_files_where_nothing_changed_the_set_at_run_time() -> None:
    a, b, c, d = (scenario(n) for n in "abcd")
    s = ScenarioSet({"a": a, "b": b, "c": c, "d": d}, "b", 7)
    mine = scenario("c", "description: the admin's")
    s.add(mine)  # replaced at run time
    s.remove("d")  # removed at run time
    s.add(scenario("x"))  # added at run time
    new_a = scenario("a", "seed: 3")
    new_b = scenario("b", "seed: 4")
    e = scenario("e")
    x_file = scenario("x", "seed: 5")
    files = {"a": new_a, "c": scenario("c", "seed: 6"), "d": d, "e": e, "x": x_file}
    rebased = s.rebase(files, "b")
    # a changed in the file: the new one; b gone from the files: removed, and it was
    # the default; c and x are the admin's; d, removed at run time, stays removed; e new.
    assert rebased.changed == ("a", "e")
    assert rebased.removed == ("b",)
    assert list(s.scenarios) == ["a", "c", "x", "e"]
    assert s.scenarios["a"] is new_a and s.scenarios["c"] is mine
    assert s.default is None
    # What POST /reset goes back to is the files' set now (its default gone with it).
    s.restore()
    assert list(s.scenarios) == ["a", "c", "d", "e", "x"]
    assert s.scenarios["x"] is x_file and s.default is None
    # The configured default comes back with its file.
    s.rebase({**s.scenarios, "b": new_b}, "b")
    s.restore()
    assert s.default == "b" and s.scenarios["b"] is new_b


def test_rebase_keeps_an_unchanged_scenario_and_its_count() -> None:
    once = scenario("once", "requests: [2]")
    s = ScenarioSet({"once": once}, None, 7)
    headers = {"X-Chaos-Scenario": "once"}
    assert s.choose("POST", CHAT, headers).active is False  # its first request
    # The files read again: the same document is the same scenario, its count goes on.
    rebased = s.rebase({"once": scenario("once", "requests: [2]")}, None)
    assert rebased.changed == () and rebased.removed == ()
    assert s.scenarios["once"] is once
    assert s.choose("POST", CHAT, headers).active is True  # its second
    # Changed: a new scenario, counted from 1.
    assert s.rebase({"once": scenario("once", "requests: [1]")}, None).changed == ("once",)
    assert s.choose("POST", CHAT, headers).active is True


def test_rebase_without_apply_changes_only_what_reset_goes_back_to() -> None:
    a, b = scenario("a"), scenario("b")
    s = ScenarioSet({"a": a}, "a", 7)
    assert s.rebase({"b": b}, "b", apply=False) == Rebased()
    assert list(s.scenarios) == ["a"] and s.default == "a"
    assert s.initial() == ({"b": b}, "b")
    s.restore()
    assert list(s.scenarios) == ["b"] and s.default == "b"


# --------------------------------------------------------------------------- the chooser


def test_a_chooser_counts_apart_and_starts_again_when_told(library: dict[str, Scenario]) -> None:
    """The set's ``Chooser`` alone: its own counters over the set's scenarios, the
    seeds derived under the salt it is given, ordinals forgotten per scenario or all."""
    chosen = ScenarioSet(library, default="first-only", base_seed=5)
    chooser = Chooser(chosen, threading.Lock())
    got = [chooser.choose("GET", "/x", {}, "pod-a") for _ in range(3)]
    assert [(names(c), c.ordinal, c.active) for c in got] == [
        ("first-only", 1, True),
        ("first-only", 2, False),
        ("first-only", 3, False),
    ]
    assert [c.seed for c in got] == [derive_seed(5, n, "pod-a") for n in (1, 2, 3)]
    assert chosen.choose("GET", "/x", {}).ordinal == 1  # the set's own counters: apart
    chooser.forget("first-only")
    again = chooser.choose("GET", "/x", {}, None)
    assert (again.ordinal, again.active, again.seed) == (1, True, derive_seed(5, 4))
    chooser.reset()
    fresh = chooser.choose("POST", "/_chaos/plain" + CHAT, {}, None)
    assert (names(fresh), fresh.ordinal, fresh.seed, fresh.path) == (
        "plain",
        1,
        derive_seed(5, 1),
        CHAT,
    )


def test_a_chooser_follows_the_sets_changes(library: dict[str, Scenario]) -> None:
    chosen = ScenarioSet(library, base_seed=5)
    chooser = Chooser(chosen, threading.Lock())
    assert names(chooser.choose("GET", "/x", {}, None)) is None  # no default: passthrough
    chosen.set_default("plain")
    assert names(chooser.choose("GET", "/x", {}, None)) == "plain"
    chosen.remove("plain")
    with pytest.raises(UnknownScenario, match="'plain'"):
        chooser.choose("GET", "/x", {"X-Chaos-Scenario": "plain"}, None)
