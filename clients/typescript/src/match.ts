/**
 * Which requests meet `verify`'s filters, and what `verify` says when they are not the
 * count expected: chaosproxy/observe/journal.py's `misses`, `matches` and `verify`, the
 * same rules and the same message, so a failing `verify` reads alike from Python and
 * from TypeScript.
 */

import { ContentNotKeptError, VerificationError } from "./errors.js";
import type { JournalRequest, RequestSummary } from "./types.js";

/** What a request must be: every filter given must hold. */
export interface Criteria {
  /** An `fnmatch` glob of the model (a plain name is exact). */
  model?: string;
  /** An `fnmatch` glob of the path (without the query). */
  path?: string;
  /** A substring of any text the request sent (needs `--log-content`). */
  contains?: string;
  /** The name of a tool the request offered. */
  tool?: string;
  /** The name of the scenario the request chose. */
  scenario?: string;
}

const KEYS = ["model", "path", "contains", "tool", "scenario"] as const;

/** The filters given, in the order the admin API and Python name them. */
export function given(criteria: Criteria): [string, string][] {
  const out: [string, string][] = [];
  for (const key of KEYS) {
    const value = criteria[key];
    if (value !== undefined && value !== null) out.push([key, value]);
  }
  return out;
}

function describe(criteria: Criteria): string {
  return given(criteria).map(([k, v]) => `${k}=${pyRepr(v)}`).join(", ") || "any request";
}

/** A value as Python's `repr` shows it (strings, null, numbers, booleans, lists). */
export function pyRepr(value: unknown): string {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return String(value);
  if (Array.isArray(value)) return `[${value.map(pyRepr).join(", ")}]`;
  const text = String(value);
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + quote;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0))
      out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + quote;
}

const cache = new Map<string, RegExp>();

/** Python's `fnmatch.fnmatchcase`: `*`, `?`, `[seq]` and `[!seq]`, case-sensitive. */
export function fnmatchcase(name: string, pattern: string): boolean {
  let re = cache.get(pattern);
  if (re === undefined) {
    re = new RegExp(`^(?:${translate(pattern)})$`, "su");
    cache.set(pattern, re);
  }
  return re.test(name);
}

function translate(pattern: string): string {
  let out = "";
  let i = 0;
  const n = pattern.length;
  while (i < n) {
    const c = pattern[i++];
    if (c === "*") {
      while (pattern[i] === "*") i++;
      out += ".*";
    } else if (c === "?") {
      out += ".";
    } else if (c === "[") {
      let j = i;
      if (pattern[j] === "!") j++;
      if (pattern[j] === "]") j++;
      while (j < n && pattern[j] !== "]") j++;
      if (j >= n) {
        out += "\\[";
      } else {
        let body = pattern.slice(i, j);
        i = j + 1;
        const negate = body.startsWith("!");
        if (negate) body = body.slice(1);
        if (body === "") out += negate ? "." : "(?!)";
        else out += `[${negate ? "^" : ""}${body.replace(/[\\[\]^]/g, "\\$&")}]`;
      }
    } else {
      out += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    }
  }
  return out;
}

function* strings(value: unknown): Generator<string> {
  if (typeof value === "string") yield value;
  else if (Array.isArray(value)) for (const v of value) yield* strings(v);
  else if (value !== null && typeof value === "object")
    for (const v of Object.values(value)) yield* strings(v);
}

function* texts(request: JournalRequest): Generator<string> {
  const messages = request.messages;
  if (Array.isArray(messages)) {
    for (const m of messages) if (m.text !== undefined) yield m.text;
  }
  yield* strings(request.body);
}

/**
 * What of `criteria` a request's summary does not meet, one phrase each (empty: it
 * matches). ContentNotKeptError when `contains` is asked of a request whose prompts
 * the journal did not keep.
 */
export function misses(summary: RequestSummary, criteria: Criteria): string[] {
  const request = summary.request;
  const out: string[] = [];
  const model = "model" in summary ? (summary.model ?? null) : (request?.model ?? null);
  if (criteria.model !== undefined && !fnmatchcase(model ?? "", criteria.model))
    out.push(`model is ${pyRepr(model)}`);
  const path = summary.path.split("?", 1)[0];
  if (criteria.path !== undefined && !fnmatchcase(path, criteria.path))
    out.push(`path is ${pyRepr(path)}`);
  const tools = "tools" in summary ? (summary.tools ?? []) : (request?.tools ?? []);
  if (criteria.tool !== undefined && !tools.includes(criteria.tool))
    out.push(tools.length > 0 ? `tools are ${pyRepr(tools)}` : "no tools offered");
  if (criteria.contains !== undefined) {
    if (request?.body_omitted_reason === "content") throw new ContentNotKeptError(criteria.contains);
    const found = request !== undefined && [...texts(request)].some((t) => t.includes(criteria.contains as string));
    if (!found) {
      const what = request !== undefined && "body" in request ? "its body" : "its request (not kept)";
      out.push(`${pyRepr(criteria.contains)} is not in ${what}`);
    }
  }
  if (criteria.scenario !== undefined && summary.scenario !== criteria.scenario)
    out.push(`scenario is ${pyRepr(summary.scenario)}`);
  return out;
}

/** Whether the request meets every filter given. */
export function matches(summary: RequestSummary, criteria: Criteria): boolean {
  return misses(summary, criteria).length === 0;
}

/** How many near misses `verify` lists. */
const SHOWN = 10;

function short(text: string, limit = 60): string {
  // Python counts code points.
  const points = [...text];
  return points.length <= limit ? text : points.slice(0, limit - 1).join("") + "…";
}

/**
 * The summaries that match, oldest first; VerificationError unless there are `count`
 * of them (undefined or null: at least one).
 */
export function verifySummaries(
  summaries: RequestSummary[],
  criteria: Criteria,
  count?: number | null,
): RequestSummary[] {
  const found = summaries.filter((s) => matches(s, criteria)).map((s) => ({ ...s }));
  const any = count === undefined || count === null;
  if ((any && found.length > 0) || (!any && found.length === count)) return found;
  const wanted = any ? "at least 1" : `exactly ${count}`;
  const plural = any || count === 1 ? "" : "s";
  const lines = [
    `expected ${wanted} request${plural} with ${describe(criteria)}; ` +
      `found ${found.length} among ${summaries.length} finished request` +
      `${summaries.length === 1 ? "" : "s"}`,
  ];
  // A stable sort, as Python's sorted().
  const near = summaries
    .map((s, i) => ({ s, i, n: misses(s, criteria).length }))
    .sort((a, b) => a.n - b.n || a.i - b.i)
    .slice(0, SHOWN)
    .map((x) => x.s);
  for (const summary of near) {
    const what = misses(summary, criteria);
    const messages = summary.request?.messages;
    let last: string | undefined;
    if (Array.isArray(messages)) {
      for (let k = messages.length - 1; k >= 0; k--) {
        if (messages[k].role === "user" && messages[k].text !== undefined) {
          last = messages[k].text;
          break;
        }
      }
    }
    let head =
      `  ${summary.request_id} ${summary.method} ${summary.path}` +
      ` model=${pyRepr(summary.model ?? null)} tools=${pyRepr(summary.tools ?? [])}`;
    if (last !== undefined) head += ` last user message=${pyRepr(short(last))}`;
    lines.push(head + (what.length > 0 ? ": " + what.join("; ") : ": matches"));
  }
  if (summaries.length > SHOWN) lines.push(`  … and ${summaries.length - SHOWN} more`);
  throw new VerificationError(lines.join("\n"));
}
