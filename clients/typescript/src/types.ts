/**
 * The shapes the chaosproxy admin API answers with (docs/admin-api.md), as
 * chaosproxy/core/records.py types them in Python: a key marked `?` is there only when
 * it applies. Objects the proxy may grow keep an index signature, so a newer proxy's
 * keys are read, not refused.
 */

/** How a request ended. */
export type Outcome =
  | "completed"
  | "cut"
  | "client_gone"
  | "upstream_error"
  | "shutdown"
  | "proxy_error"
  | "worker_lost";

/** What the client was sent, compared with what the upstream meant (docs/integrity.md). */
export type Integrity = "intact" | "altered" | "incomplete" | "broken";

/** The content of an answer, however its connection ended. */
export type AnswerContent = "intact" | "altered" | "incomplete";

/** What a client run is judged (docs/verdicts.md). */
export type Verdict =
  | "detected"
  | "silent_corruption"
  | "tolerated"
  | "false_alarm"
  | "hung"
  | "not_exercised";

/** Every verdict, from the worst a CI gate can find to the best. */
export const VERDICTS: readonly Verdict[] = [
  "silent_corruption",
  "hung",
  "false_alarm",
  "detected",
  "tolerated",
  "not_exercised",
];

/** The verdicts that fail a CI gate by default (`chaosproxy matrix --fail-on`, `chaos_verdict`). */
export const FAILING: readonly Verdict[] = ["silent_corruption", "false_alarm", "hung"];

/** A scenario as `GET /scenarios/{name}` shows it: the shape of its YAML file. */
export interface ScenarioView {
  name: string;
  description?: string | null;
  seed?: number | null;
  provider?: string;
  format?: string;
  match?: unknown;
  requests?: unknown;
  faults: Record<string, unknown>[];
  /** Read-only: the file it came from (`body` for one posted to the admin API). */
  source?: string;
  [key: string]: unknown;
}

/** A scenario to add: YAML text, or an object in the shape of its file. */
export type ScenarioSpec = string | Record<string, unknown>;

/** A mock fixture (or a fixture file's `{"fixtures": [...]}`): YAML text or an object (docs/mock.md). */
export type FixtureSpec = string | Record<string, unknown>;

/** One message of a request, as the journal keeps it. */
export interface JournalMessage {
  role: string;
  text?: string;
  chars?: number;
  sha256?: string;
}

/** What a client sent, parsed (docs/mock.md, The request journal), credentials `***`. */
export interface JournalRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  headers_truncated?: { fields: number; bytes: number; omitted: number; cut: number };
  model?: string | null;
  stream?: boolean | null;
  tools?: string[];
  messages?: JournalMessage[] | number;
  body?: unknown;
  body_omitted?: boolean;
  body_omitted_reason?: "content" | "size" | "depth";
  body_bytes?: number;
  body_sha256?: string;
}

/** What every verdict record shares. */
export interface Judgement {
  verdict: Verdict;
  integrity: Integrity | null;
  content: AnswerContent | null;
  reason: string;
  text_matches: boolean | null;
}

/** A verdict as `POST /requests/{id}/verdict` answers it. */
export interface RunVerdict extends Judgement {
  /** Every request of the client run judged together, in the order they began (the last is the one judged). */
  requests: string[];
}

/** A summary's `verdict`: the last verdict recorded on the request. */
export interface RecordedVerdict extends Judgement {
  ts?: string;
  requests?: string[];
}

/** What a request asked and how it was chosen (its `request` line). */
export interface RequestFields {
  request_id: string;
  /** The scenario the request chose (null: none, passthrough). */
  scenario: string | null;
  replica?: string;
  seed: number;
  method: string;
  path: string;
  ordinal?: number;
  model?: string;
  messages?: number;
  tools?: string[];
  body_bytes?: number;
  body_sha256?: string;
  [key: string]: unknown;
}

/**
 * A finished request: its `request` line merged with its `response_end` line
 * (docs/observability.md). What `requests()`, `last()`, `summary()` and `verify()` return.
 */
export interface RequestSummary extends RequestFields {
  ts: string;
  outcome: Outcome;
  status: number;
  bytes: number;
  frames: number;
  content_type?: string;
  provider?: string;
  format?: "sse" | "ndjson" | "raw";
  events_in?: number;
  events_out?: number;
  faults_applied?: Record<string, number>;
  ttfb_ms?: number | null;
  max_gap_ms?: number;
  duration_ms: number;
  integrity?: Integrity;
  content_integrity?: Integrity;
  error?: string;
  reason?: string;
  request?: JournalRequest;
  verdict?: RecordedVerdict;
}

/** `GET /requests`' summary of a finished request. */
export interface DoneSummary extends RequestSummary {
  state: "done";
}

/** `GET /requests`' summary of a request in flight: what was sent so far. */
export interface InFlightSummary extends RequestFields {
  ts: string;
  state: "in_flight";
  bytes: number;
  frames: number;
  request?: JournalRequest;
}

/** A request as the admin API shows it, told apart by `state`. */
export type AdminSummary = DoneSummary | InFlightSummary;

/** One page of `GET /requests`: newest first; `next` is the cursor of the next page (null: none). */
export interface RequestPage {
  requests: AdminSummary[];
  next: string | null;
}

/** `GET /requests/{id}`: one request, its frames, actions and contract violations. */
export interface RequestDetail {
  summary: AdminSummary;
  frames: Record<string, unknown>[];
  actions: Record<string, unknown>[];
  violations: Record<string, unknown>[];
  omitted_lines: number;
  [key: string]: unknown;
}

/** `GET /health`: without the token, `status` and `warnings` only. */
export interface Health {
  status: string;
  warnings: string[];
  version?: string;
  build?: string;
  uptime_s?: number;
  scenarios?: number;
  default?: string | null;
  in_flight?: number;
  [key: string]: unknown;
}

/** What `GET /mock/fixtures` lists: a fixture with `source` (`added` or `files`). */
export interface FixtureView {
  name?: string;
  source?: string;
  [key: string]: unknown;
}
