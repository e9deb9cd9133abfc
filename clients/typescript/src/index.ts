/**
 * @chaosproxy/client: chaosproxy's admin API for TypeScript (docs/typescript.md).
 * The Vitest and Jest helpers are `@chaosproxy/client/vitest` and `@chaosproxy/client/jest`.
 */

export { ChaosClient, type ChaosClientOptions, isScenarioName, type RequestQuery, type RequestsOptions, SETTLE_MS, type VerdictOptions, type VerifyOptions } from "./client.js";
export { ChaosAuthError, ChaosClientError, ChaosLookupError, ContentNotKeptError, NO_CONTENT, UnknownRequestError, VerificationError } from "./errors.js";
export { REQUEST_ID_HEADER, requestIdOf, SCENARIO_HEADER, SEED_HEADER, scenarioHeaders } from "./headers.js";
export { type Criteria, fnmatchcase, matches, misses } from "./match.js";
export { type ChaosProxyOptions, ChaosProxyStartError, type RunningChaosProxy, startChaosProxy } from "./serve.js";
export * from "./types.js";
export {
  type ChaosTestVerdict,
  ChaosVerdictError,
  type ClientReport,
  clientRun,
  expectNoSilentCorruption,
  expectVerdictPasses,
  judgeRun,
} from "./verdicts.js";
