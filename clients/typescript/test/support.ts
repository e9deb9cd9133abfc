/**
 * What the tests share (no test module imports another): the chaosproxy of this
 * checkout, run by $CHAOSPROXY_PYTHON (default python3), and a streamed chat completion
 * read as an OpenAI client reads it.
 */

import { spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import type { ChaosProxyOptions } from "../src/index.js";

/** The root of this checkout: its chaosproxy is the one the tests run. */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const PYTHON = process.env.CHAOSPROXY_PYTHON ?? "python3";

/** Options that start this checkout's `chaosproxy serve`. */
export function here(options: ChaosProxyOptions = {}): ChaosProxyOptions {
  const path = [REPO, process.env.PYTHONPATH].filter((p) => p !== undefined && p !== "").join(":");
  return { python: PYTHON, cwd: REPO, ...options, env: { PYTHONPATH: path, ...options.env } };
}

/** Run a Python script with this checkout's chaosproxy importable; its stdout. */
export function python(script: string, input = "", env: Record<string, string> = {}): string {
  const done = spawnSync(PYTHON, ["-c", script], {
    cwd: REPO,
    input,
    encoding: "utf8",
    env: { ...process.env, ...env, PYTHONPATH: REPO },
  });
  if (done.status !== 0) throw new Error(`python failed (${done.status}): ${done.stderr}`);
  return done.stdout;
}

export interface Streamed {
  status: number;
  requestId: string | null;
  /** The deltas' text, joined, as a client assembles it. */
  text: string;
  /** Each event's delta text, in order (an event without any: none). */
  deltas: string[];
  /** Whether `data: [DONE]` arrived. */
  done: boolean;
  finishReason: string | null;
}

/** A streamed chat completion through the proxy at `url`, read to its end. */
export async function streamChat(url: string, prompt: string, headers: Record<string, string> = {}): Promise<Streamed> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "gpt-4o", stream: true, messages: [{ role: "user", content: prompt }] }),
  });
  const body = await response.text();
  const deltas: string[] = [];
  let done = false;
  let finishReason: string | null = null;
  for (const line of body.split("\n")) {
    if (!line.startsWith("data: ")) continue;
    const data = line.slice(6).trim();
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const chunk = JSON.parse(data) as { choices: { delta?: { content?: string }; finish_reason?: string | null }[] };
    for (const choice of chunk.choices) {
      if (choice.delta?.content !== undefined) deltas.push(choice.delta.content);
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return { status: response.status, requestId: response.headers.get("x-chaos-request-id"), text: deltas.join(""), deltas, done, finishReason };
}

/** A local port nothing listens on (bound, then closed). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}
