/**
 * Assertions on a recorded verdict (docs/verdicts.md), for any test framework: they
 * throw an Error that says the verdict, its reason and the request.
 */

import { FAILING, type RunVerdict, type Verdict } from "./types.js";

export class ChaosVerdictError extends Error {
  readonly verdict: RunVerdict;

  constructor(message: string, verdict: RunVerdict) {
    super(message);
    this.name = "ChaosVerdictError";
    this.verdict = verdict;
  }
}

function fail(verdict: RunVerdict, what: string): never {
  const request = verdict.requests.at(-1);
  throw new ChaosVerdictError(
    `${verdict.verdict}${what}: ${verdict.reason}${request === undefined ? "" : ` (request ${request})`}`,
    verdict,
  );
}

/**
 * Throws unless the verdict passes the gate: not one of `failOn` (default
 * silent_corruption, false_alarm and hung, as `chaos_verdict` and `matrix --fail-on`).
 */
export function expectVerdictPasses(verdict: RunVerdict, options: { failOn?: readonly Verdict[] } = {}): void {
  const failOn = options.failOn ?? FAILING;
  if (failOn.includes(verdict.verdict)) fail(verdict, "");
}

/** Throws when the client accepted a damaged answer as whole (`silent_corruption`). */
export function expectNoSilentCorruption(verdict: RunVerdict): void {
  if (verdict.verdict === "silent_corruption") fail(verdict, " (the client accepted a damaged answer)");
}

/** What a client concluded (docs/verdicts.md): the text it assembled, the error it raised, or that it gave up. */
export interface ClientReport {
  text?: string | null;
  error?: string | Error | null;
  timedOut?: boolean;
}

/** A verdict `judgeRun` recorded, with the request judged and its scenario. */
export interface ChaosTestVerdict extends RunVerdict {
  request_id: string;
  scenario: string | null;
}

/**
 * Run the client in `fn`, adding what it assembles to `run.text`: an error it throws
 * is the client's error (recorded, not thrown). Resolves to the report to judge.
 */
export async function clientRun(fn: (run: { text: string }) => unknown): Promise<ClientReport> {
  const run = { text: "" };
  try {
    await fn(run);
    return { text: run.text, error: null };
  } catch (exc) {
    const error = exc instanceof Error ? `${exc.name}: ${exc.message}` : String(exc);
    return { text: run.text, error };
  }
}

/** The calls `judgeRun` makes of a ChaosClient. */
interface Judge {
  requests(options?: { settleMs?: number }): Promise<{ request_id: string; scenario: string | null }[]>;
  verdict(requestId: string, options: ClientReport & { requests?: string[] }): Promise<RunVerdict>;
}

/**
 * Judge the client run made of every finished request the proxy knows (a proxy of the
 * test's own: the test's requests, retries and reconnects included; the last to begin
 * is the one judged), as pytest's `chaos_verdict` does, and throw a ChaosVerdictError
 * when the verdict is one of `failOn` (default: silent_corruption, false_alarm, hung).
 */
export async function judgeRun(
  client: Judge,
  report: ClientReport,
  options: { failOn?: readonly Verdict[] } = {},
): Promise<ChaosTestVerdict> {
  const done = await client.requests();
  const judged = done.at(-1);
  if (judged === undefined) throw new Error("judgeRun: the test made no request through the proxy");
  const verdict = await client.verdict(judged.request_id, { ...report, requests: done.map((r) => r.request_id) });
  const recorded: ChaosTestVerdict = { ...verdict, request_id: judged.request_id, scenario: judged.scenario };
  if ((options.failOn ?? FAILING).includes(recorded.verdict)) {
    throw new ChaosVerdictError(
      `${recorded.verdict} under ${recorded.scenario ?? "no scenario"}: ${recorded.reason} (request ${recorded.request_id})`,
      recorded,
    );
  }
  return recorded;
}
