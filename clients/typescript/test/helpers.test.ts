/**
 * The test helpers: a proxy of the test's own (chaosTest), stopped after it; a start
 * that cannot succeed says why; the verdict assertions.
 */

import { afterAll, describe, expect, test } from "vitest";

import {
  ChaosProxyStartError,
  ChaosVerdictError,
  clientRun,
  expectNoSilentCorruption,
  expectVerdictPasses,
  judgeRun,
  type RunVerdict,
  startChaosProxy,
} from "../src/index.js";
import { createChaosTest } from "../src/vitest.js";
import { here, streamChat } from "./support.js";

const chaosTest = createChaosTest(here({ scenario: "duplicate-third-delta" }));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const pids: number[] = [];

describe("chaosTest", () => {
  chaosTest("gives the test a running proxy with its options", async ({ chaosproxy }) => {
    pids.push(chaosproxy.pid);
    expect(alive(chaosproxy.pid)).toBe(true);
    expect(chaosproxy.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await chaosproxy.client.default()).toBe("duplicate-third-delta");
    const streamed = await streamChat(chaosproxy.url, "fixture");
    expect((await chaosproxy.client.summary(streamed.requestId as string)).faults_applied).toEqual({ duplicate: 1 });
    expect(chaosproxy.stderr()).toContain("listening on " + chaosproxy.url);
  });

  chaosTest("a proxy per test: a fresh one, and the one before has stopped", async ({ chaosproxy }) => {
    pids.push(chaosproxy.pid);
    expect(pids).toHaveLength(2);
    expect(pids[1]).not.toBe(pids[0]);
    expect(alive(pids[0])).toBe(false);
    expect(await chaosproxy.client.requests({ settleMs: 0 })).toEqual([]);
  });

  afterAll(() => {
    expect(pids.map(alive)).toEqual([false, false]);
  });
});

describe("startChaosProxy", () => {
  test("a Python that does not exist is a ChaosProxyStartError that names the variable", async () => {
    const error = await startChaosProxy({ python: "/nonexistent/python3" }).catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(ChaosProxyStartError);
    expect((error as Error).message).toBe(
      "cannot run /nonexistent/python3 (spawn /nonexistent/python3 ENOENT): set CHAOSPROXY_PYTHON to the Python that has chaosproxy installed",
    );
  });

  test("a serve that refuses its flags is a ChaosProxyStartError with its stderr", async () => {
    const error = await startChaosProxy(here({ scenario: "no-such-scenario" })).catch((exc: unknown) => exc);
    expect(error).toBeInstanceOf(ChaosProxyStartError);
    const message = (error as Error).message;
    expect(message).toMatch(/^chaosproxy serve \(.+\) exited \(code 2\) before it listened:\n/);
    expect(message).toContain("no-such-scenario");
  });

  test("the admin token reaches the child in its environment, not its command line", async () => {
    const proxy = await startChaosProxy(here({ adminToken: "env-only-token" }));
    try {
      const { readFileSync } = await import("node:fs");
      const cmdline = readFileSync(`/proc/${proxy.pid}/cmdline`, "utf8");
      expect(cmdline).toContain("chaosproxy");
      expect(cmdline).not.toContain("env-only-token");
      expect((await proxy.client.health()).version).toBeDefined(); // the client sends it
    } finally {
      await proxy.stop();
    }
    expect(alive(proxy.pid)).toBe(false);
    await proxy.stop(); // a second stop is a no-op
  });
});

describe("verdict assertions", () => {
  const verdict = (name: RunVerdict["verdict"]): RunVerdict => ({
    verdict: name,
    integrity: "altered",
    content: "altered",
    reason: "the client accepted an altered answer (duplicate)",
    text_matches: false,
    requests: ["r-1", "r-2"],
  });

  test("expectVerdictPasses fails on the default gate's verdicts only", () => {
    for (const passing of ["detected", "tolerated", "not_exercised"] as const) expectVerdictPasses(verdict(passing));
    for (const failing of ["silent_corruption", "false_alarm", "hung"] as const) {
      expect(() => expectVerdictPasses(verdict(failing))).toThrow(ChaosVerdictError);
    }
    expect(() => expectVerdictPasses(verdict("detected"), { failOn: ["detected"] })).toThrow(
      "detected: the client accepted an altered answer (duplicate) (request r-2)",
    );
  });

  test("expectNoSilentCorruption fails on silent_corruption alone", () => {
    expectNoSilentCorruption(verdict("hung"));
    expect(() => expectNoSilentCorruption(verdict("silent_corruption"))).toThrow(
      "silent_corruption (the client accepted a damaged answer): the client accepted an altered answer (duplicate) (request r-2)",
    );
  });
});

describe("chaosVerdict", () => {
  chaosTest("judges the test's run and fails the test on a silent corruption", async ({ chaosproxy, chaosVerdict }) => {
    let id: string | null = null;
    const report = await clientRun(async (run) => {
      const streamed = await streamChat(chaosproxy.url, "judge me");
      id = streamed.requestId;
      run.text += streamed.text;
    });
    expect(report.error).toBeNull();
    const error = (await chaosVerdict(report).catch((exc: unknown) => exc)) as ChaosVerdictError;
    expect(error).toBeInstanceOf(ChaosVerdictError);
    expect(error.message).toBe(
      `silent_corruption under duplicate-third-delta: the client accepted an altered answer (duplicate) (request ${id})`,
    );
    expect(error.verdict.requests).toEqual([id]);
    expect((await chaosproxy.client.summary(id as unknown as string)).verdict?.verdict).toBe("silent_corruption");
  });

  chaosTest("a retried run is judged on its last request; an error the client raised is recorded", async ({ chaosproxy, chaosVerdict }) => {
    const ids: (string | null)[] = [];
    const report = await clientRun(async (run) => {
      for (const attempt of ["first try", "retry"]) {
        const streamed = await streamChat(chaosproxy.url, attempt);
        ids.push(streamed.requestId);
        run.text = streamed.text;
      }
      throw new TypeError("the client gave up: duplicated text");
    });
    expect(report.error).toBe("TypeError: the client gave up: duplicated text");
    const verdict = await chaosVerdict(report);
    expect(verdict.verdict).toBe("detected");
    expect(verdict.request_id).toBe(ids[1]);
    expect(verdict.requests).toEqual(ids);
    expect(verdict.scenario).toBe("duplicate-third-delta");
  });

  test("judgeRun without a request says so", async () => {
    const client = { requests: async () => [], verdict: async () => Promise.reject(new Error("not called")) };
    await expect(judgeRun(client, { text: "x" })).rejects.toThrow("judgeRun: the test made no request through the proxy");
  });
});
