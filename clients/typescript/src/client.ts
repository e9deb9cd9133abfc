/**
 * `ChaosClient`: a running chaosproxy's admin API (docs/admin-api.md), typed, with the
 * calls of chaosproxy's Python `ChaosClient` (chaosproxy/control/client.py) in camelCase.
 *
 * ```ts
 * const chaos = new ChaosClient("http://127.0.0.1:8478", { token: process.env.CHAOSPROXY_ADMIN_TOKEN });
 * await chaos.withScenario("cut-before-terminal-reset", async () => {
 *   await runMyClient();
 * });
 * expect((await chaos.last()).outcome).toBe("cut");
 * ```
 *
 * Node 20's `fetch` only: no runtime dependency. Times are in milliseconds.
 */

import { ChaosAuthError, ChaosClientError, ChaosLookupError, UnknownRequestError } from "./errors.js";
import { type Criteria, given, verifySummaries } from "./match.js";
import type {
  AdminSummary,
  DoneSummary,
  FixtureSpec,
  FixtureView,
  Health,
  RequestDetail,
  RequestPage,
  RequestSummary,
  RunVerdict,
  ScenarioSpec,
  ScenarioView,
} from "./types.js";

/** `GET /requests` asks for at most this many a page (the proxy keeps fewer: `--history`). */
const ALL = 1_000_000;
/** How often the calls that wait for requests in flight ask again, in ms. */
const POLL_MS = 20;
/** How long the calls that read finished requests wait for those in flight, by default, in ms. */
export const SETTLE_MS = 5_000;
/** What a scenario name is (chaosproxy/scenario/model.py's NAME_PATTERN). */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export interface ChaosClientOptions {
  /** The proxy's `--admin-token` (CHAOSPROXY_ADMIN_TOKEN), sent as `Authorization: Bearer …`. */
  token?: string;
  /** How long one call may take, in ms (default 10 000). */
  timeoutMs?: number;
}

/** `GET /requests`' query (docs/admin-api.md): one page. */
export interface RequestQuery extends Criteria {
  /** At most this many summaries (the admin's default: 50). */
  limit?: number;
  /** The `next` of the page before. */
  cursor?: string;
  /** At most this many bytes of summaries (the admin's default: 1 MiB). */
  maxBytes?: number;
}

export interface RequestsOptions extends Criteria {
  /** Wait up to this long for the requests in flight to end first, in ms (default 5000). */
  settleMs?: number;
}

export interface VerifyOptions extends RequestsOptions {
  /** Exactly this many must match (default: at least one). */
  count?: number | null;
}

export interface VerdictOptions {
  /** The text the client assembled. */
  text?: string | null;
  /** The error the client raised (an Error is recorded as `Name: message`). */
  error?: string | Error | null;
  /** Whether the client gave up waiting. */
  timedOut?: boolean;
  /** The other requests of the same client run (retries). */
  requests?: string[];
  /** Wait up to this long for the requests to end first, in ms (default 5000). */
  timeoutMs?: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function quote(part: string): string {
  return encodeURIComponent(part);
}

/** True when `nameOrYaml` is a scenario name rather than YAML text. */
export function isScenarioName(nameOrYaml: string): boolean {
  return NAME.test(nameOrYaml);
}

function specText(spec: ScenarioSpec | FixtureSpec): string {
  return typeof spec === "string" ? spec : JSON.stringify(spec);
}

/** A finished request's summary as `GET /requests` shows it, without `state`. */
function finished(view: DoneSummary): RequestSummary {
  const { state: _state, ...summary } = view;
  return summary;
}

export class ChaosClient {
  /** The admin API's base URL (its `--admin` address, `http://HOST:PORT`). */
  readonly adminUrl: string;
  readonly timeoutMs: number;
  readonly #token: string | undefined;
  #blocks = 0;

  constructor(adminUrl: string, options: ChaosClientOptions = {}) {
    this.adminUrl = adminUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** Never the token. */
  toString(): string {
    return `ChaosClient(${this.adminUrl})`;
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  toJSON(): { adminUrl: string } {
    return { adminUrl: this.adminUrl };
  }

  // ------------------------------------------------------------------ transport

  async #call<T>(method: string, path: string, body?: string, query?: Record<string, string>): Promise<T> {
    const text = await this.#send(method, path, body, query, "application/json");
    try {
      return JSON.parse(text) as T;
    } catch {
      const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
      throw new ChaosClientError(`${method} ${this.adminUrl + path}: the answer is not JSON: ${JSON.stringify(shown)}`);
    }
  }

  async #send(
    method: string,
    path: string,
    body: string | undefined,
    query: Record<string, string> | undefined,
    accept: string,
  ): Promise<string> {
    let url = this.adminUrl + path;
    if (query !== undefined && Object.keys(query).length > 0) url += "?" + new URLSearchParams(query).toString();
    const headers: Record<string, string> = { Accept: accept };
    if (body !== undefined && body !== "") {
      headers["Content-Type"] = body.trimStart().startsWith("{") ? "application/json" : "application/yaml";
    }
    if (this.#token !== undefined) headers.Authorization = `Bearer ${this.#token}`;
    let response: Response;
    try {
      response = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (exc) {
      throw new ChaosClientError(`cannot reach the chaosproxy admin API at ${this.adminUrl}: ${reason(exc)}`);
    }
    let text: string;
    try {
      text = await response.text();
    } catch (exc) {
      throw new ChaosClientError(`${method} ${url}: the answer was cut: ${reason(exc)}`, response.status);
    }
    if (!response.ok) throw this.#error(response.status, text, method, url);
    return text;
  }

  #error(status: number, body: string, method: string, url: string): ChaosClientError {
    if (status === 401) {
      const why = this.#token === undefined ? "no token was given" : "the token was refused";
      return new ChaosAuthError(
        `the chaosproxy admin API at ${url} answered 401 Unauthorized: ${why}; ` +
          "pass new ChaosClient(adminUrl, { token }) the proxy's --admin-token",
      );
    }
    let message = `${method} ${url}: ${status}`;
    let problems: string[] = [];
    try {
      const parsed = JSON.parse(body) as { error?: { message?: unknown }; problems?: unknown };
      if (parsed.error !== undefined && typeof parsed.error.message === "string") {
        message = `${message}: ${parsed.error.message}`;
      }
      if (Array.isArray(parsed.problems)) problems = parsed.problems.map(String);
    } catch {
      // not JSON: the status says it
    }
    if (problems.length > 0) message += problems.map((p) => `\n  ${p}`).join("");
    return new ChaosClientError(message, status, problems);
  }

  // ------------------------------------------------------------------ health

  /** `GET /health`: `status` and `warnings`; with the token (or none needed), the details. */
  async health(): Promise<Health> {
    return this.#call<Health>("GET", "/health");
  }

  /** `GET /metrics`: Prometheus text. */
  async metrics(): Promise<string> {
    return this.#send("GET", "/metrics", undefined, undefined, "text/plain");
  }

  // ------------------------------------------------------------------ scenarios

  /** Every loaded scenario, as `GET /scenarios` shows it. */
  async scenarios(): Promise<ScenarioView[]> {
    return (await this.#call<{ scenarios: ScenarioView[] }>("GET", "/scenarios")).scenarios;
  }

  /** One scenario in the shape of its file (`GET /scenarios/{name}`). */
  async getScenario(name: string): Promise<ScenarioView> {
    return this.#call<ScenarioView>("GET", "/scenarios/" + quote(name));
  }

  /** The current default scenario (null: passthrough). */
  async default(): Promise<string | null> {
    return (await this.#call<{ default: string | null }>("GET", "/scenarios")).default;
  }

  /** Make `name` the default scenario (null: passthrough). */
  async use(name: string | null): Promise<void> {
    await this.#call("PUT", "/default", JSON.stringify({ scenario: name }));
  }

  /**
   * Add (or replace) a scenario given as YAML text or an object; resolves to its name.
   * ChaosClientError (status 400, `problems`) when it is not valid.
   */
  async addScenario(scenario: ScenarioSpec, name?: string): Promise<string> {
    const query = name !== undefined ? { name } : undefined;
    const added = await this.#call<ScenarioView>("POST", "/scenarios", specText(scenario), query);
    if (name !== undefined && added.name !== name) {
      throw new Error(`name ${JSON.stringify(name)} given, but the scenario says name: ${added.name}`);
    }
    return added.name;
  }

  async removeScenario(name: string): Promise<void> {
    await this.#call("DELETE", "/scenarios/" + quote(name));
  }

  /**
   * Run `fn` with a default scenario, as Python's `with chaos.scenario(...)`: a name, or
   * a scenario (YAML text or an object) added for the call (named `block-N` unless it
   * has a `name:`) and then removed, or the one it replaced put back. The previous
   * default is restored after, whether `fn` returns or throws. Resolves to what `fn`
   * resolves to; `fn` is given the scenario's name.
   */
  async withScenario<T>(nameOrSpec: ScenarioSpec, fn: (name: string) => T | Promise<T>): Promise<T> {
    const previous = await this.default();
    let added: string | undefined;
    let replaced: ScenarioView | undefined;
    let name: string;
    if (typeof nameOrSpec === "string" && isScenarioName(nameOrSpec)) {
      name = nameOrSpec;
    } else {
      this.#blocks += 1;
      const block = `block-${this.#blocks}`;
      const known = new Map((await this.scenarios()).map((s) => [s.name, s]));
      const view = await this.#call<ScenarioView>("POST", "/scenarios", specText(nameOrSpec), { name: block });
      added = view.name;
      replaced = known.get(added);
      name = added;
    }
    try {
      await this.use(name);
      return await fn(name);
    } finally {
      if (replaced !== undefined) {
        await this.#call("POST", "/scenarios", JSON.stringify(replaced));
      } else if (added !== undefined) {
        await this.removeScenario(added).catch((exc: unknown) => {
          if (!(exc instanceof ChaosClientError)) throw exc;
        });
      }
      try {
        await this.use(previous);
      } catch (exc) {
        if (!(exc instanceof ChaosClientError)) throw exc;
        await this.use(null); // the previous default was removed meanwhile
      }
    }
  }

  // ------------------------------------------------------------------ requests

  /** One page of `GET /requests` (newest first), with the query the admin API takes. */
  async requestPage(query: RequestQuery = {}): Promise<RequestPage> {
    const ask: Record<string, string> = Object.fromEntries(given(query));
    if (query.limit !== undefined) ask.limit = String(query.limit);
    if (query.cursor !== undefined) ask.cursor = query.cursor;
    if (query.maxBytes !== undefined) ask.max_bytes = String(query.maxBytes);
    return this.#call<RequestPage>("GET", "/requests", undefined, ask);
  }

  /** Every summary `GET /requests` lists for `query`, newest first, page after page. */
  async *listRequests(query: Omit<RequestQuery, "cursor"> = {}): AsyncGenerator<AdminSummary> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.requestPage({ ...query, cursor });
      yield* page.requests;
      if (page.next === null || page.next === undefined) return;
      cursor = page.next;
    }
  }

  async #all(query: Omit<RequestQuery, "cursor">): Promise<AdminSummary[]> {
    const found: AdminSummary[] = [];
    for await (const summary of this.listRequests(query)) found.push(summary);
    return found;
  }

  /**
   * Summaries of the finished requests, oldest first, with the parsed `request` while
   * the journal keeps it; only those that meet every filter given (`scenario` its name,
   * `model` and `path` fnmatch globs, `contains` a substring of any text the request
   * sent, `tool` a tool it offered). Waits up to `settleMs` for the requests in flight
   * to end first, so a request whose response the client has just read is there.
   */
  async requests(options: RequestsOptions = {}): Promise<RequestSummary[]> {
    const { settleMs = SETTLE_MS, ...criteria } = options;
    const query = { ...criteria, limit: ALL };
    const deadline = Date.now() + settleMs;
    let recent: AdminSummary[];
    for (;;) {
      recent = await this.#all(query);
      if (recent.every((r) => r.state === "done") || Date.now() >= deadline) break;
      await sleep(POLL_MS);
    }
    return recent
      .filter((r): r is DoneSummary => r.state === "done")
      .reverse()
      .map(finished);
  }

  /**
   * The finished requests that meet the filters (as `requests` takes them), asserting
   * there are exactly `count` of them (default: at least one), as WireMock's `verify`.
   * Throws VerificationError otherwise, listing the requests seen and what each lacked;
   * ContentNotKeptError for `contains` without `--log-content`.
   */
  async verify(options: VerifyOptions = {}): Promise<RequestSummary[]> {
    const { count, settleMs, ...criteria } = options;
    return verifySummaries(await this.requests({ settleMs }), criteria, count);
  }

  /** The summary of the most recently finished request; ChaosLookupError when none has. */
  async last(options: { settleMs?: number } = {}): Promise<RequestSummary> {
    const done = await this.requests(options);
    const last = done.at(-1);
    if (last === undefined) throw new ChaosLookupError("no request has gone through the proxy yet");
    return last;
  }

  /**
   * `GET /requests/{id}`, waiting up to `timeoutMs` (default 0: not waiting) for the
   * request to end; UnknownRequestError when the proxy does not know it, or it had not
   * ended when a wait was asked for.
   */
  async requestDetail(requestId: string, options: { timeoutMs?: number } = {}): Promise<RequestDetail> {
    const timeoutMs = options.timeoutMs ?? 0;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let detail: RequestDetail;
      try {
        detail = await this.#call<RequestDetail>("GET", "/requests/" + quote(requestId));
      } catch (exc) {
        if (exc instanceof ChaosClientError && exc.status === 404) throw new UnknownRequestError(requestId);
        throw exc;
      }
      if (detail.summary.state === "done") return detail;
      if (Date.now() >= deadline) {
        if (timeoutMs > 0) throw new UnknownRequestError(requestId);
        return detail;
      }
      await sleep(POLL_MS);
    }
  }

  /**
   * The summary of a finished request (from its `X-Chaos-Request-Id`), waiting up to
   * `timeoutMs` (default 5000) for it to end; UnknownRequestError when the proxy does
   * not know it or it has not ended.
   */
  async summary(requestId: string, options: { timeoutMs?: number } = {}): Promise<RequestSummary> {
    const shown = (await this.requestDetail(requestId, { timeoutMs: options.timeoutMs ?? SETTLE_MS })).summary;
    if (shown.state !== "done") throw new UnknownRequestError(requestId);
    return finished(shown);
  }

  /** The `frame` lines the proxy kept of a request (`--history-frames`). */
  async frames(requestId: string): Promise<Record<string, unknown>[]> {
    return (await this.requestDetail(requestId)).frames;
  }

  /**
   * Record what the client concluded about the answer of `requestId` (the text it
   * assembled, the error it raised, or that it timed out) and judge it
   * (docs/verdicts.md). The answer judged is over the reconnects of its stream and the
   * other requests of the same client run given in `requests` (retries). Waits up to
   * `timeoutMs` for the requests to end first; UnknownRequestError when the proxy does
   * not know one or it has not ended.
   */
  async verdict(requestId: string, options: VerdictOptions = {}): Promise<RunVerdict> {
    const timeoutMs = options.timeoutMs ?? SETTLE_MS;
    const requests = options.requests ?? [];
    for (const rid of [requestId, ...requests]) await this.requestDetail(rid, { timeoutMs });
    const error = options.error instanceof Error ? `${options.error.name}: ${options.error.message}` : options.error;
    const fields: Record<string, unknown> = {
      text: options.text ?? null,
      error: error ?? null,
      timed_out: options.timedOut ?? false,
    };
    if (requests.length > 0) fields.requests = requests;
    try {
      return await this.#call<RunVerdict>("POST", `/requests/${quote(requestId)}/verdict`, JSON.stringify(fields));
    } catch (exc) {
      if (exc instanceof ChaosClientError && exc.status === 404) throw new UnknownRequestError(requestId);
      throw exc;
    }
  }

  // ------------------------------------------------------------------ mock fixtures

  /** `GET /mock/fixtures`: the fixtures added at run time, then the files'. */
  async fixtures(): Promise<FixtureView[]> {
    return (await this.#call<{ fixtures: FixtureView[] }>("GET", "/mock/fixtures")).fixtures;
  }

  /**
   * `POST /mock/fixtures`: add mock fixtures (one, or a fixture file's
   * `{"fixtures": [...]}`); resolves to those added. ChaosClientError with status 400
   * (`problems`) when not valid, 409 when no upstream of the proxy is the built-in mock.
   */
  async addFixture(fixture: FixtureSpec): Promise<FixtureView[]> {
    return (await this.#call<{ added: FixtureView[] }>("POST", "/mock/fixtures", specText(fixture))).added;
  }

  /** `DELETE /mock/fixtures`: remove the fixtures added at run time; resolves to how many. */
  async clearFixtures(): Promise<number> {
    return (await this.#call<{ removed: number }>("DELETE", "/mock/fixtures")).removed;
  }

  /** `POST /reset`: back to the proxy's state at start-up. */
  async reset(): Promise<void> {
    await this.#call("POST", "/reset");
  }
}

function reason(exc: unknown): string {
  if (exc instanceof Error) {
    if (exc.name === "TimeoutError") return exc.message;
    const cause = (exc as Error & { cause?: unknown }).cause;
    if (cause instanceof Error) return (cause as Error & { code?: string }).code ?? cause.message;
    return exc.message;
  }
  return String(exc);
}
