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
