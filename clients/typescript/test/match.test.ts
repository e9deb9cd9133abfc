/**
 * verify's rules are Python's: fnmatch globs and the repr in its messages, checked
 * against Python itself on the same inputs (one Python process for all of them).
 */

import { describe, expect, test } from "vitest";

import { ContentNotKeptError, fnmatchcase, misses, NO_CONTENT, type RequestSummary } from "../src/index.js";
import { pyRepr } from "../src/match.js";
import { python } from "./support.js";

const CASES: [string, string][] = [
  ["gpt-4o", "gpt-4o"],
  ["gpt-4o", "gpt-*"],
  ["gpt-4o-mini", "gpt-4o"],
  ["GPT-4o", "gpt-*"],
  ["claude-3", "claude-?"],
  ["claude-35", "claude-?"],
  ["a.b", "a?b"],
  ["a.b", "a.b"],
  ["axb", "a.b"],
  ["/v1/chat/completions", "/v1/*"],
  ["/v1/chat/completions", "/v1/*/completions"],
  ["model-b", "model-[abc]"],
  ["model-d", "model-[abc]"],
  ["model-d", "model-[!abc]"],
  ["model-a", "model-[!abc]"],
  ["m3", "m[0-9]"],
  ["m-", "m[a-]"],
  ["m[", "m["],
  ["m]", "m[]]"],
  ["m^", "m[^]"],
  ["line\nbreak", "line*"],
  ["(x)+{y}|$", "(x)+{y}|$"],
  ["", "*"],
  ["", "?"],
  ["a\\b", "a\\b"],
  ["été", "?t?"],
];

const REPRS: unknown[] = [
  "gpt-4o",
  "it's",
  'say "hi"',
  `both ' and "`,
  "back\\slash",
  "new\nline\ttab\rret",
  "\u0001\u007f",
  "été ✨ 🤖",
  "",
  null,
  [],
  ["a", "b'c"],
];

describe("as Python has it", () => {
  test("fnmatchcase matches as Python's fnmatch.fnmatchcase", () => {
    const expected = JSON.parse(
      python(
        "import json, sys\nfrom fnmatch import fnmatchcase\n" +
          "print(json.dumps([fnmatchcase(n, p) for n, p in json.load(sys.stdin)]))",
        JSON.stringify(CASES),
      ),
    ) as boolean[];
    expect(CASES.map(([name, pattern]) => fnmatchcase(name, pattern))).toEqual(expected);
    expect(expected.filter(Boolean).length).toBeGreaterThan(5); // both answers are exercised
    expect(expected.filter((x) => !x).length).toBeGreaterThan(5);
  });

  test("pyRepr is Python's repr", () => {
    const expected = JSON.parse(
      python("import json, sys\nprint(json.dumps([repr(v) for v in json.load(sys.stdin)]))", JSON.stringify(REPRS)),
    ) as string[];
    expect(REPRS.map(pyRepr)).toEqual(expected);
  });
});

function summary(fields: Partial<RequestSummary>): RequestSummary {
  return {
    request_id: "r-1",
    scenario: null,
    seed: 1,
    method: "POST",
    path: "/v1/chat/completions?key=***",
    ts: "2026-01-01T00:00:00Z",
    outcome: "completed",
    status: 200,
    bytes: 10,
    frames: 1,
    duration_ms: 1,
    ...fields,
  };
}

describe("misses", () => {
  test("says what each filter found instead", () => {
    const s = summary({ model: "gpt-4o", tools: ["search"], scenario: "a" });
    expect(misses(s, { model: "claude-*", path: "/v1/responses", tool: "fetch", scenario: "b" })).toEqual([
      "model is 'gpt-4o'",
      "path is '/v1/chat/completions'",
      "tools are ['search']",
      "scenario is 'a'",
    ]);
    expect(misses(s, { model: "gpt-*", path: "/v1/chat/*", tool: "search", scenario: "a" })).toEqual([]);
  });

  test("reads the model and the tools from the request when the summary has none", () => {
    const s = summary({ request: { method: "POST", path: "/", headers: {}, model: "m1", tools: [] } });
    expect(misses(s, { model: "m2", tool: "t" })).toEqual(["model is 'm1'", "no tools offered"]);
  });

  test("contains searches the messages and the body; without them it says so", () => {
    const kept = summary({
      request: { method: "POST", path: "/", headers: {}, messages: [{ role: "user", text: "hello" }], body: { system: "be brief" } },
    });
    expect(misses(kept, { contains: "brief" })).toEqual([]);
    expect(misses(kept, { contains: "absent" })).toEqual(["'absent' is not in its body"]);
    expect(misses(summary({}), { contains: "x" })).toEqual(["'x' is not in its request (not kept)"]);
    const omitted = summary({ request: { method: "POST", path: "/", headers: {}, body_omitted: true, body_omitted_reason: "content" } });
    const error = (() => {
      try {
        misses(omitted, { contains: "x" });
      } catch (exc) {
        return exc;
      }
    })();
    expect(error).toBeInstanceOf(ContentNotKeptError);
    expect((error as Error).message).toBe(NO_CONTENT);
  });
});
