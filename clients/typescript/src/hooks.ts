/**
 * The proxy of a test file, started before its tests and stopped after them, for any
 * framework with `beforeAll` and `afterAll` hooks (Vitest's, Jest's).
 */

import type { ChaosClient } from "./client.js";
import { type ChaosProxyOptions, type RunningChaosProxy, startChaosProxy } from "./serve.js";

/** The hooks a framework gives (their timeouts in ms, as Vitest and Jest take them). */
export interface Hooks {
  beforeAll(fn: () => Promise<void>, timeout?: number): void;
  afterAll(fn: () => Promise<void>, timeout?: number): void;
}

/** What `setupChaosProxy` returns: the proxy once the tests run (read it in a test or a hook). */
export interface ChaosProxyHandle {
  readonly url: string;
  readonly adminUrl: string;
  readonly client: ChaosClient;
  /** The running proxy itself. */
  readonly proxy: RunningChaosProxy;
}

export function setupWith(hooks: Hooks, options: ChaosProxyOptions = {}): ChaosProxyHandle {
  let running: RunningChaosProxy | undefined;
  const proxy = (): RunningChaosProxy => {
    if (running === undefined) {
      throw new Error("the chaosproxy of setupChaosProxy() is not running: read it in a test or a hook, not at import");
    }
    return running;
  };
  const margin = 5_000;
  hooks.beforeAll(async () => {
    running = await startChaosProxy(options);
  }, (options.startTimeoutMs ?? 30_000) + margin);
  hooks.afterAll(async () => {
    await running?.stop();
    running = undefined;
  }, (options.stopTimeoutMs ?? 10_000) + margin);
  return {
    get url() {
      return proxy().url;
    },
    get adminUrl() {
      return proxy().adminUrl;
    },
    get client() {
      return proxy().client;
    },
    get proxy() {
      return proxy();
    },
  };
}
