/**
 * Vitest helpers, as chaosproxy's pytest plugin gives Python tests theirs
 * (docs/typescript.md):
 *
 * ```ts
 * import { chaosTest, setupChaosProxy } from "@chaosproxy/client/vitest";
 *
 * const chaos = setupChaosProxy();          // one proxy for the file (chaos_proxy_session)
 * chaosTest("a proxy of its own", async ({ chaosproxy }) => { … });   // one per test (chaos_proxy)
 * ```
 */

import { afterAll, beforeAll, test } from "vitest";

import { type ChaosProxyHandle, setupWith } from "./hooks.js";
import { type ChaosProxyOptions, type RunningChaosProxy, startChaosProxy } from "./serve.js";

export type { ChaosProxyHandle } from "./hooks.js";
import { type ChaosTestVerdict, type ClientReport, judgeRun } from "./verdicts.js";

export { clientRun, expectNoSilentCorruption, expectVerdictPasses, judgeRun } from "./verdicts.js";

/**
 * One `chaosproxy serve` for the test file: started in `beforeAll`, stopped in
 * `afterAll`. Read `url`, `adminUrl` and `client` in the tests.
 */
export function setupChaosProxy(options: ChaosProxyOptions = {}): ChaosProxyHandle {
  return setupWith({ beforeAll, afterAll }, options);
}

/** The fixtures of `chaosTest`. */
export interface ChaosFixtures {
  /** A proxy of the test's own, started before it and stopped after it. */
  chaosproxy: RunningChaosProxy;
  /**
   * Record what the client concluded about the test's run through `chaosproxy` and
   * fail the test on silent_corruption, false_alarm or hung (pytest's `chaos_verdict`).
   */
  chaosVerdict: (report: ClientReport) => Promise<ChaosTestVerdict>;
}

/** `test` with a `chaosproxy` fixture started with `options` (as pytest's `chaos_proxy`). */
export function createChaosTest(options: ChaosProxyOptions = {}) {
  return test.extend<ChaosFixtures>({
    // biome-ignore lint/correctness/noEmptyPattern: Vitest reads a fixture's dependencies from its first argument
    chaosproxy: async ({}, use) => {
      const proxy = await startChaosProxy(options);
      try {
        await use(proxy);
      } finally {
        await proxy.stop();
      }
    },
    chaosVerdict: async ({ chaosproxy }, use) => {
      await use((report) => judgeRun(chaosproxy.client, report));
    },
  });
}

/** `test` with a `chaosproxy` fixture: a proxy of the test's own in front of the built-in mock. */
export const chaosTest = createChaosTest();
