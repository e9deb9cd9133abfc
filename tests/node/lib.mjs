// Shared by the client scripts. Each script exports `body(rec, ctx)`, what the client
// does in one run, and runs it once when it is started itself (`node openai-chat.mjs`):
// read the run's settings from the environment, give the run a hard deadline, print
// exactly one JSON line describing what the client did, exit 0. tests/node/runner.mjs
// runs many of them in one process instead, each with settings of its own.
//
//   CHAOS_URL          the proxy's base URL (http://127.0.0.1:PORT), required
//   CHAOS_SCENARIO     the scenario name, sent as X-Chaos-Scenario ("none": passthrough)
//   CHAOS_TIMEOUT_MS   the hard per-run deadline (default 3000); when it passes before
//                      the client finished, the run is reported as hung
//   CHAOS_SDK_TIMEOUT_MS  the `timeout` option given to the SDKs that have one (default
//                      1000, shorter than the deadline: a hang that outlives it shows
//                      that the SDK's timeout does not cover reading the body)
//
// The line: {client, scenario, text, events, error, ended, hung, ms, ...extra}
//   text    the answer text as the client assembled it (its deltas, concatenated)
//   events  what the client yielded, one short string each ("text:Hello", "finish:stop")
//   error   null, or {name, message, code?, cause?: {...}} (the cause chain, outermost first)
//   ended   the client's stream/iteration finished normally (no error, no hang)
//   hung    the deadline passed while the client was still waiting

import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const PROMPT = "Plan my week, please.";

/**
 * One run's settings, read from `env` (the process's environment, or a runner job's):
 * {url, scenario, headers, timeoutMs, sdkTimeoutMs, env, fetch}. `fetch` is what the
 * client fetches with (the runner gives each run one with a connection pool of its own).
 */
export function settings(env, fetchImpl = globalThis.fetch) {
  if (!env.CHAOS_URL) throw new SettingsError("CHAOS_URL is not set");
  const scenario = env.CHAOS_SCENARIO || "none";
  return {
    url: env.CHAOS_URL.replace(/\/+$/, ""),
    scenario,
    headers: { "X-Chaos-Scenario": scenario },
    timeoutMs: Number(env.CHAOS_TIMEOUT_MS || 3000),
    sdkTimeoutMs: Number(env.CHAOS_SDK_TIMEOUT_MS || 1000),
    env,
    fetch: fetchImpl,
  };
}

export class SettingsError extends Error {}

/** An SDK client's options: no retries, the SDK's own timeout, the scenario header. */
export function sdkOptions(baseURL, ctx, defaultHeaders = ctx.headers) {
  return {
    baseURL,
    apiKey: "test",
    maxRetries: 0,
    timeout: ctx.sdkTimeoutMs,
    defaultHeaders,
    fetch: ctx.fetch,
  };
}

export function describeError(err, depth = 0) {
  if (err === undefined || err === null) return null;
  if (typeof err !== "object") return { name: typeof err, message: String(err) };
  const out = { name: err.constructor?.name ?? "Object", message: String(err.message ?? "") };
  if (err.code !== undefined) out.code = err.code;
  if (err.status !== undefined) out.status = err.status;
  if (err.type !== undefined && typeof err.type === "string") out.type = err.type;
  if (err.cause !== undefined && depth < 4) out.cause = describeError(err.cause, depth + 1);
  return out;
}

/**
 * Run `body(rec, ctx)` once: the record's JSON line, as it stood when the body returned
 * or threw, or when the deadline passed (what the body does after that is not seen).
 */
export async function execute(client, body, ctx) {
  const started = performance.now();
  const elapsed = () => Math.floor(performance.now() - started);
  const rec = {
    client,
    scenario: ctx.scenario,
    text: "",
    events: [],
    error: null,
    ended: false,
    hung: false,
  };
  // A timer counts from the loop's cached time, which can be a few ms old: it may fire
  // before `timeoutMs` has passed since `started`. The deadline is not reached until then.
  let timer;
  const deadline = new Promise((resolve) => {
    const check = () => {
      const left = ctx.timeoutMs - elapsed();
      if (left > 0) timer = setTimeout(check, left);
      else resolve("hung");
    };
    timer = setTimeout(check, ctx.timeoutMs);
  });
  const work = (async () => {
    try {
      await body(rec, ctx);
      return "ended";
    } catch (err) {
      return { error: err };
    }
  })();
  const how = await Promise.race([work, deadline]);
  clearTimeout(timer);
  if (how === "hung") rec.hung = true;
  else if (how === "ended") rec.ended = true;
  else rec.error = describeError(how.error);
  rec.ms = elapsed();
  return JSON.stringify(rec);
}

/**
 * When the module at `moduleUrl` is the one Node was started with: run `body` once with
 * the process's environment, print its line, exit 0 (2 when the settings are missing).
 */
export async function main(moduleUrl, client, body) {
  if (!process.argv[1] || fileURLToPath(moduleUrl) !== realpathSync(process.argv[1])) return;
  let ctx;
  try {
    ctx = settings(process.env);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  const line = await execute(client, body, ctx);
  process.stdout.write(line + "\n", () => process.exit(0));
}
