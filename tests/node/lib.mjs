// Shared by the client scripts: read the run's settings from the environment, give the
// run a hard deadline, and print exactly one JSON line describing what the client did.
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

export const URL_ = required("CHAOS_URL").replace(/\/+$/, "");
export const SCENARIO = process.env.CHAOS_SCENARIO || "none";
export const TIMEOUT_MS = Number(process.env.CHAOS_TIMEOUT_MS || 3000);
export const SDK_TIMEOUT_MS = Number(process.env.CHAOS_SDK_TIMEOUT_MS || 1000);
export const HEADERS = { "X-Chaos-Scenario": SCENARIO };
export const PROMPT = "Plan my week, please.";

/** An SDK client's options: no retries, the SDK's own timeout, the scenario header. */
export function sdkOptions(baseURL, defaultHeaders = HEADERS) {
  return { baseURL, apiKey: "test", maxRetries: 0, timeout: SDK_TIMEOUT_MS, defaultHeaders };
}

function required(name) {
  const value = process.env[name];
  if (!value) {
    process.stderr.write(`${name} is not set\n`);
    process.exit(2);
  }
  return value;
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

/** Run `body(rec)` once; print the record when it returns, throws, or the deadline passes. */
export async function run(client, body) {
  const started = Date.now();
  const rec = { client, scenario: SCENARIO, text: "", events: [], error: null, ended: false, hung: false };
  let printed = false;
  const finish = () => {
    if (printed) return;
    printed = true;
    rec.ms = Date.now() - started;
    process.stdout.write(JSON.stringify(rec) + "\n", () => process.exit(0));
  };
  const timer = setTimeout(() => {
    rec.hung = true;
    finish();
  }, TIMEOUT_MS);
  try {
    await body(rec);
    rec.ended = true;
  } catch (err) {
    rec.error = describeError(err);
  }
  clearTimeout(timer);
  finish();
}
