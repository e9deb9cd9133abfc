/**
 * The Jest helper takes Jest's global hooks: here Vitest's, put where Jest puts its
 * own, so the module is run as a Jest test file runs it (Jest itself is not a
 * dependency of the package).
 */

import { afterAll, beforeAll, expect, test } from "vitest";

Object.assign(globalThis, { beforeAll, afterAll });
const { setupChaosProxy } = await import("../src/jest.js");
const { here, streamChat } = await import("./support.js");

const chaos = setupChaosProxy(here());

test("setupChaosProxy from /jest starts a proxy for the file", async () => {
  const streamed = await streamChat(chaos.url, "jest", { "X-Chaos-Scenario": "duplicate-third-delta" });
  const [found] = await chaos.client.verify({ scenario: "duplicate-third-delta", count: 1 });
  expect(found.request_id).toBe(streamed.requestId);
  expect(chaos.proxy.adminUrl).toBe(chaos.adminUrl);
});

test("contains without --log-content: verify says the journal keeps no prompts, the admin API too", async () => {
  const { ChaosClientError, ContentNotKeptError, NO_CONTENT } = await import("../src/index.js");
  await streamChat(chaos.url, "a prompt not kept");
  const local = await chaos.client.verify({ contains: "prompt" }).catch((exc: unknown) => exc);
  expect(local).toBeInstanceOf(ContentNotKeptError);
  expect((local as Error).message).toBe(NO_CONTENT);
  const remote = (await chaos.client.requests({ contains: "prompt" }).catch((exc: unknown) => exc)) as InstanceType<
    typeof ChaosClientError
  >;
  expect(remote).toBeInstanceOf(ChaosClientError);
  expect(remote.status).toBe(400);
  expect(remote.message).toContain("--log-content");
});

test("without Jest's globals it says what it needs", async () => {
  const hooks = globalThis as unknown as Record<string, unknown>;
  const saved = { beforeAll: hooks.beforeAll, afterAll: hooks.afterAll };
  Object.assign(globalThis, { beforeAll: undefined });
  try {
    expect(() => setupChaosProxy()).toThrow("needs Jest's global beforeAll and afterAll");
  } finally {
    Object.assign(globalThis, saved);
  }
});
