/**
 * ChaosClient against a real `chaosproxy serve` of this checkout (with a token and
 * --log-content): every call of the admin API, a streamed request through the proxy
 * under a scenario, verify finding it, a verdict recorded, and the errors typed.
 */

import { readFileSync } from "node:fs";

import { afterEach, describe, expect, test } from "vitest";

import {
  ChaosAuthError,
  ChaosClient,
  ChaosClientError,
  ChaosLookupError,
  REQUEST_ID_HEADER,
  scenarioHeaders,
  UnknownRequestError,
  VerificationError,
} from "../src/index.js";
import { setupChaosProxy } from "../src/vitest.js";
import { closedPort, here, python, streamChat } from "./support.js";

const TOKEN = "t0ken-for-the-typescript-tests";
const chaos = setupChaosProxy(here({ adminToken: TOKEN, logContent: true, seed: 7 }));

afterEach(async () => {
  await chaos.client.reset();
});

describe("health and auth", () => {
  test("health says the proxy's version, the package's", async () => {
    const health = await chaos.client.health();
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    expect(health.status).toBe("ok");
    expect(health.version).toBe(pkg.version);
    expect(health.default).toBeNull();
    expect(health.in_flight).toBe(0);
  });

  test("without the token, health says only that the proxy is up", async () => {
    const anonymous = new ChaosClient(chaos.adminUrl);
    expect(await anonymous.health()).toEqual({ status: "ok", warnings: [] });
  });

  test("a refused token is a ChaosAuthError that says so, without the token", async () => {
    const wrong = new ChaosClient(chaos.adminUrl, { token: "not-the-token" });
    const error = await wrong.scenarios().catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(ChaosAuthError);
    expect(error).toBeInstanceOf(ChaosClientError);
    const auth = error as ChaosAuthError;
    expect(auth.status).toBe(401);
    expect(auth.message).toBe(
      `the chaosproxy admin API at ${chaos.adminUrl}/scenarios answered 401 Unauthorized: the token was refused; ` +
        "pass new ChaosClient(adminUrl, { token }) the proxy's --admin-token",
    );
    expect(String(wrong)).toBe(`ChaosClient(${chaos.adminUrl})`);
    expect(JSON.stringify(wrong)).not.toContain("not-the-token");
  });

  test("no token is a ChaosAuthError that says none was given", async () => {
    const error = await new ChaosClient(chaos.adminUrl).use(null).catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(ChaosAuthError);
    expect((error as Error).message).toContain("answered 401 Unauthorized: no token was given;");
  });

  test("an admin API that cannot be reached is a ChaosClientError with status 0", async () => {
    const port = await closedPort();
    const gone = new ChaosClient(`http://127.0.0.1:${port}`, { timeoutMs: 2_000 });
    const error = (await gone.health().catch((exc: unknown) => exc)) as ChaosClientError;
    expect(error).toBeInstanceOf(ChaosClientError);
    expect(error.status).toBe(0);
    expect(error.message).toBe(`cannot reach the chaosproxy admin API at http://127.0.0.1:${port}: ECONNREFUSED`);
  });
});

describe("scenarios and the default", () => {
  test("the library is listed, one scenario read in the shape of its file", async () => {
    const names = (await chaos.client.scenarios()).map((s) => s.name);
    expect(names).toContain("duplicate-third-delta");
    const one = await chaos.client.getScenario("slow-first-byte");
    expect(one.name).toBe("slow-first-byte");
    expect(one.faults).toHaveLength(1);
    expect((one.faults[0].delay as { first_byte: string }).first_byte).toBe("800ms");
  });

  test("a scenario added as YAML, then as an object, then removed", async () => {
    const client = chaos.client;
    expect(await client.addScenario("faults:\n  - delay: {per_event: 1ms, kind: delta}\n", "ts-yaml")).toBe("ts-yaml");
    expect(await client.addScenario({ name: "ts-object", faults: [{ rechunk: { size: 3 } }] })).toBe("ts-object");
    expect((await client.getScenario("ts-yaml")).source).toBe("body");
    expect((await client.getScenario("ts-object")).faults).toEqual([
      { rechunk: expect.objectContaining({ size: 3 }) },
    ]);
    await client.removeScenario("ts-yaml");
    const names = (await client.scenarios()).map((s) => s.name);
    expect(names).toContain("ts-object");
    expect(names).not.toContain("ts-yaml");
  });

  test("an invalid scenario is a 400 with every problem, and nothing changed", async () => {
    const before = (await chaos.client.scenarios()).length;
    const error = (await chaos.client
      .addScenario({ name: "bad", faults: [{ rechunk: { size: 0 } }] })
      .catch((exc: unknown) => exc)) as ChaosClientError;
    expect(error).toBeInstanceOf(ChaosClientError);
    expect(error.status).toBe(400);
    expect(error.problems).toEqual(["body:1: faults[0].rechunk.size: must be >= 1"]);
    expect(error.message).toBe(
      `POST ${chaos.adminUrl}/scenarios: 400: 1 problem(s) in the scenario; nothing changed\n` +
        "  body:1: faults[0].rechunk.size: must be >= 1",
    );
    expect(await chaos.client.scenarios()).toHaveLength(before);
  });

  test("an unknown scenario is a 4xx with the admin's message", async () => {
    const use = (await chaos.client.use("no-such-scenario").catch((exc: unknown) => exc)) as ChaosClientError;
    expect(use).toBeInstanceOf(ChaosClientError);
    expect(use.status).toBe(400);
    expect(use.message).toBe(`PUT ${chaos.adminUrl}/default: 400: unknown scenario 'no-such-scenario'`);
    const remove = (await chaos.client.removeScenario("no-such-scenario").catch((exc: unknown) => exc)) as ChaosClientError;
    expect(remove.status).toBe(404);
    expect(remove.message).toBe(`DELETE ${chaos.adminUrl}/scenarios/no-such-scenario: 404: unknown scenario 'no-such-scenario'`);
  });

  test("the default is set and read", async () => {
    expect(await chaos.client.default()).toBeNull();
    await chaos.client.use("duplicate-third-delta");
    expect(await chaos.client.default()).toBe("duplicate-third-delta");
    const streamed = await streamChat(chaos.url, "default");
    expect((await chaos.client.summary(streamed.requestId as string)).scenario).toBe("duplicate-third-delta");
    await chaos.client.use(null);
    expect(await chaos.client.default()).toBeNull();
  });
});

describe("withScenario", () => {
  test("sets the default for the call and restores the one before", async () => {
    await chaos.client.use("slow-first-byte");
    const seen = await chaos.client.withScenario("duplicate-third-delta", async (name) => {
      expect(name).toBe("duplicate-third-delta");
      return chaos.client.default();
    });
    expect(seen).toBe("duplicate-third-delta");
    expect(await chaos.client.default()).toBe("slow-first-byte");
  });

  test("restores the default when the function throws, and throws its error", async () => {
    const thrown = new Error("the client under test failed");
    const error = await chaos.client
      .withScenario("duplicate-third-delta", () => {
        throw thrown;
      })
      .catch((exc: unknown) => exc);
    expect(error).toBe(thrown);
    expect(await chaos.client.default()).toBeNull();
  });

  test("a scenario given as YAML is added for the call as block-N, then removed", async () => {
    const names = await chaos.client.withScenario("faults:\n  - duplicate: {kind: delta, nth: 2}\n", async (name) => {
      const streamed = await streamChat(chaos.url, "block");
      expect((await chaos.client.summary(streamed.requestId as string)).faults_applied).toEqual({ duplicate: 1 });
      return [name, await chaos.client.default()];
    });
    expect(names[0]).toMatch(/^block-\d+$/);
    expect(names[1]).toBe(names[0]);
    expect((await chaos.client.scenarios()).map((s) => s.name)).not.toContain(names[0]);
    expect(await chaos.client.default()).toBeNull();
  });

  test("a scenario that replaced one is put back as it was", async () => {
    const before = await chaos.client.getScenario("slow-first-byte");
    await chaos.client.withScenario({ name: "slow-first-byte", faults: [{ rechunk: { size: 2 } }] }, async () => {
      expect(Object.keys((await chaos.client.getScenario("slow-first-byte")).faults[0])).toEqual(["rechunk"]);
    });
    const after = await chaos.client.getScenario("slow-first-byte");
    expect(after.faults).toEqual(before.faults);
  });
});

describe("requests through the proxy", () => {
  test("a stream under a scenario chosen by header: verify finds it, the verdict is recorded", async () => {
    const clean = await streamChat(chaos.url, "tell me about my résumé");
    const streamed = await streamChat(chaos.url, "tell me about my résumé", scenarioHeaders("duplicate-third-delta"));
    expect(streamed.status).toBe(200);
    expect(streamed.done).toBe(true);
    // The mock answers a prompt alike; the scenario sent its third delta twice (the
    // first event, the role's with empty text, is the start, not a delta).
    expect(clean.deltas[0]).toBe("");
    expect(streamed.deltas).toEqual([...clean.deltas.slice(0, 4), clean.deltas[3], ...clean.deltas.slice(4)]);
    const id = streamed.requestId as string;

    const [found] = await chaos.client.verify({ scenario: "duplicate-third-delta", count: 1 });
    expect(found.request_id).toBe(id);
    expect(found.outcome).toBe("completed");
    expect(found.faults_applied).toEqual({ duplicate: 1 });
    expect(found.request?.messages).toEqual([{ role: "user", text: "tell me about my résumé" }]);
    const both = await chaos.client.verify({ contains: "résumé", model: "gpt-*", path: "/v1/chat/*", count: 2 });
    expect(both.map((r) => r.request_id)).toEqual([clean.requestId, id]);

    const verdict = await chaos.client.verdict(id, { text: streamed.text });
    expect(verdict).toEqual({
      verdict: "silent_corruption",
      integrity: "altered",
      content: "altered",
      reason: "the client accepted an altered answer (duplicate)",
      text_matches: false,
      requests: [id],
    });
    const summary = await chaos.client.summary(id);
    expect(summary.verdict?.verdict).toBe("silent_corruption");
    expect((await chaos.client.last()).request_id).toBe(id);
  });

  test("a verdict on an error the client raised", async () => {
    const streamed = await streamChat(chaos.url, "cut", scenarioHeaders("cut-before-terminal-close"));
    const id = streamed.requestId as string;
    const verdict = await chaos.client.verdict(id, { error: new TypeError("the stream ended early") });
    expect(verdict.verdict).toBe("detected");
    expect(verdict.requests).toEqual([id]);
  });

  test("verify's failure is Python's, word for word", async () => {
    await streamChat(chaos.url, "first prompt");
    await streamChat(chaos.url, "second prompt", scenarioHeaders("duplicate-third-delta"));
    const error = await chaos.client
      .verify({ model: "gpt-3*", scenario: "duplicate-third-delta", count: 2 })
      .catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(VerificationError);
    const fromPython = python(
      [
        "import os, sys",
        "from chaosproxy import ChaosClient",
        "from chaosproxy.observe.journal import VerificationError",
        "client = ChaosClient(sys.stdin.readline().strip(), token=os.environ['T'])",
        "try:",
        "    client.verify(2, model='gpt-3*', scenario='duplicate-third-delta')",
        "except VerificationError as exc:",
        "    sys.stdout.write(str(exc))",
      ].join("\n"),
      chaos.adminUrl + "\n",
      { T: TOKEN },
    );
    expect(fromPython).toContain("expected exactly 2 requests with model='gpt-3*', scenario='duplicate-third-delta'");
    expect((error as Error).message).toBe(fromPython);
  });

  test("the listing is paged as the admin API pages it", async () => {
    const ids: string[] = [];
    for (const prompt of ["one", "two", "three"]) ids.push((await streamChat(chaos.url, prompt)).requestId as string);
    const first = await chaos.client.requestPage({ limit: 2 });
    expect(first.requests.map((r) => r.request_id)).toEqual([ids[2], ids[1]]);
    expect(first.next).not.toBeNull();
    const second = await chaos.client.requestPage({ limit: 2, cursor: first.next as string });
    expect(second.requests.map((r) => r.request_id)).toEqual([ids[0]]);
    expect(second.next).toBeNull();
    const all: string[] = [];
    for await (const summary of chaos.client.listRequests({ limit: 1 })) all.push(summary.request_id);
    expect(all).toEqual([ids[2], ids[1], ids[0]]);
    expect((await chaos.client.requests()).map((r) => r.request_id)).toEqual(ids);
    expect((await chaos.client.requests({ contains: "two" })).map((r) => r.request_id)).toEqual([ids[1]]);
  });

  test("the frames of a request add up to the bytes the client received", async () => {
    const response = await fetch(`${chaos.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "frames" }] }),
    });
    const received = (await response.arrayBuffer()).byteLength;
    const id = response.headers.get(REQUEST_ID_HEADER) as string;
    const frames = await chaos.client.frames(id);
    expect(frames.length).toBeGreaterThan(1);
    expect(frames.reduce((sum, f) => sum + (f.size as number), 0)).toBe(received);
    expect((await chaos.client.summary(id)).bytes).toBe(received);
  });

  test("an unknown request is an UnknownRequestError; last() before any request, a ChaosLookupError", async () => {
    await expect(chaos.client.summary("r-unknown", { timeoutMs: 0 })).rejects.toBeInstanceOf(UnknownRequestError);
    await expect(chaos.client.verdict("r-unknown", { text: "x" })).rejects.toBeInstanceOf(UnknownRequestError);
    const error = await chaos.client.last({ settleMs: 0 }).catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(ChaosLookupError);
    expect((error as Error).message).toBe("no request has gone through the proxy yet");
  });
});

describe("mock fixtures and reset", () => {
  test("a fixture added is served, listed, and cleared", async () => {
    const added = await chaos.client.addFixture("name: sunny\nmatch: {message: weather}\ntext: It is sunny.\n");
    expect(added).toEqual([{ name: "sunny", match: { message: "weather" }, text: "It is sunny." }]);
    expect((await chaos.client.fixtures()).map((f) => [f.name, f.source])).toEqual([["sunny", "added"]]);
    expect((await streamChat(chaos.url, "what is the weather?")).text).toBe("It is sunny.");
    expect(await chaos.client.clearFixtures()).toBe(1);
    expect(await chaos.client.fixtures()).toEqual([]);
  });

  test("an invalid fixture is a 400 with its problems", async () => {
    const error = (await chaos.client.addFixture({ name: "x", text: 3, bogus: 1 }).catch((exc: unknown) => exc)) as ChaosClientError;
    expect(error).toBeInstanceOf(ChaosClientError);
    expect(error.status).toBe(400);
    expect(error.problems.length).toBeGreaterThan(0);
    expect(error.message).toContain(error.problems[0]);
  });

  test("reset forgets the scenarios added, the default and the history", async () => {
    await chaos.client.addScenario({ name: "to-forget", faults: [{ rechunk: { size: 4 } }] });
    await chaos.client.use("to-forget");
    await streamChat(chaos.url, "before the reset");
    await chaos.client.reset();
    expect(await chaos.client.default()).toBeNull();
    expect((await chaos.client.scenarios()).map((s) => s.name)).not.toContain("to-forget");
    expect(await chaos.client.requests({ settleMs: 0 })).toEqual([]);
  });
});
