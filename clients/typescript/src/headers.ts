/**
 * What a client sends to choose a scenario per request, and what every response says
 * (README.md, docs/scenarios.md): `X-Chaos-Scenario`, `X-Chaos-Seed`, `X-Chaos-Request-Id`.
 */

export const SCENARIO_HEADER = "X-Chaos-Scenario";
export const SEED_HEADER = "X-Chaos-Seed";
export const REQUEST_ID_HEADER = "X-Chaos-Request-Id";

/**
 * The headers that choose `scenario` for one request (and its `seed`, to reproduce a
 * run: every response says its seed in `X-Chaos-Seed`). Spread them into a fetch's or
 * an SDK's headers: `new OpenAI({ baseURL, defaultHeaders: scenarioHeaders("drop-third-delta") })`.
 * The proxy ignores them when started with `--trust-client-scenarios no`.
 */
export function scenarioHeaders(scenario: string, options: { seed?: number | bigint | string } = {}): Record<string, string> {
  const headers: Record<string, string> = { [SCENARIO_HEADER]: scenario };
  if (options.seed !== undefined) headers[SEED_HEADER] = String(options.seed);
  return headers;
}

/** The request id a response carries (`X-Chaos-Request-Id`), for `summary`, `frames` and `verdict`; null without. */
export function requestIdOf(response: { headers: { get(name: string): string | null } }): string | null {
  return response.headers.get(REQUEST_ID_HEADER);
}
