/**
 * Jest helpers (docs/typescript.md): Jest's `beforeAll` and `afterAll` are globals, so
 * this module imports nothing of Jest.
 *
 * ```ts
 * import { setupChaosProxy } from "@chaosproxy/client/jest";
 *
 * const chaos = setupChaosProxy();
 * test("…", async () => { await fetch(chaos.url + "/v1/chat/completions", …); });
 * ```
 */

import { type ChaosProxyHandle, type Hooks, setupWith } from "./hooks.js";
import type { ChaosProxyOptions } from "./serve.js";

export type { ChaosProxyHandle } from "./hooks.js";
export { clientRun, expectNoSilentCorruption, expectVerdictPasses, judgeRun } from "./verdicts.js";

/**
 * One `chaosproxy serve` for the test file: started in Jest's `beforeAll`, stopped in
 * its `afterAll`. Read `url`, `adminUrl` and `client` in the tests.
 */
export function setupChaosProxy(options: ChaosProxyOptions = {}): ChaosProxyHandle {
  const hooks = globalThis as unknown as Partial<Hooks>;
  if (typeof hooks.beforeAll !== "function" || typeof hooks.afterAll !== "function") {
    throw new Error("setupChaosProxy() from @chaosproxy/client/jest needs Jest's global beforeAll and afterAll: call it in a test file");
  }
  return setupWith({ beforeAll: hooks.beforeAll, afterAll: hooks.afterAll }, options);
}
