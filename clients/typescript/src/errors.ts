/**
 * What the client throws, as chaosproxy's Python `ChaosClient` raises it
 * (docs/python-api.md, ChaosClient): the admin API's own message, never the token.
 */

/**
 * The admin API answered with an error (`status`), or could not be reached (`status` 0).
 * `problems` lists a refused scenario's or fixture's problems (`body:LINE: key: message`).
 */
export class ChaosClientError extends Error {
  readonly status: number;
  readonly problems: string[];

  constructor(message: string, status = 0, problems: string[] = []) {
    super(message);
    this.name = "ChaosClientError";
    this.status = status;
    this.problems = problems;
  }
}

/** 401: the admin API wants a token, or another one. */
export class ChaosAuthError extends ChaosClientError {
  constructor(message: string, status = 401) {
    super(message, status);
    this.name = "ChaosAuthError";
  }
}

/** Nothing to find: `last()` before any request finished (Python's LookupError). */
export class ChaosLookupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChaosLookupError";
  }
}

/**
 * The proxy does not know the request (or no longer keeps it), or it had not ended
 * within the time given (Python's KeyError).
 */
export class UnknownRequestError extends ChaosLookupError {
  readonly requestId: string;

  constructor(requestId: string) {
    super(`no finished request ${requestId} on the proxy (unknown, forgotten, or still in flight)`);
    this.name = "UnknownRequestError";
    this.requestId = requestId;
  }
}

/**
 * `verify` found a different number of matching requests than it expected; the message
 * lists the requests seen and what each lacked (Python's VerificationError, an
 * AssertionError).
 */
export class VerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "VerificationError";
  }
}

/** What `contains` is told by a journal that keeps no prompts. */
export const NO_CONTENT =
  "contains= searches the prompts, and this proxy's journal keeps them only with " +
  "--log-content (CHAOSPROXY_LOG_CONTENT=1; ChaosProxy(log_content=True)): without it, " +
  "each message is kept as its role, length and sha256";

/** `contains` asked of a journal that keeps no prompts (no `--log-content`). */
export class ContentNotKeptError extends Error {
  readonly contains: string;

  constructor(contains: string) {
    super(NO_CONTENT);
    this.name = "ContentNotKeptError";
    this.contains = contains;
  }
}
