/**
 * `startChaosProxy()`: a `chaosproxy serve` of its own for a test, as a child process on
 * free local ports (the proxy's and its admin API's), ready when it resolves, stopped
 * by `stop()`; what the Vitest and Jest helpers start (docs/typescript.md).
 *
 * It runs `$CHAOSPROXY_PYTHON -m chaosproxy serve` (default `python3`): the Python that
 * has chaosproxy installed. The admin token goes to the child in its environment
 * (CHAOSPROXY_ADMIN_TOKEN), never on its command line.
 */

import { type ChildProcess, spawn } from "node:child_process";

import { ChaosClient } from "./client.js";

export interface ChaosProxyOptions {
  /** The Python that has chaosproxy (default: `$CHAOSPROXY_PYTHON`, else `python3`). */
  python?: string;
  /** `--upstream`: a URL, `mock` (the default: the built-in mock), or several `PREFIX=URL`. */
  upstream?: string | string[];
  /** `--scenarios`: scenario files or directories added to the built-in library. */
  scenarios?: string[];
  /** `--scenario`: the default scenario at start (default: passthrough). */
  scenario?: string;
  /** `--mock-fixtures`: fixture files or directories for the built-in mock. */
  mockFixtures?: string[];
  /** `--seed`: the base seed (default: random). */
  seed?: number | bigint;
  /** `--log-content`: the journal keeps the prompts (`contains` needs it). */
  logContent?: boolean;
  /** The admin API's token (given to the child as CHAOSPROXY_ADMIN_TOKEN); the client sends it. */
  adminToken?: string;
  /** Any other flags of `chaosproxy serve`, after those above (a later flag wins). */
  args?: string[];
  /** Variables added to the child's environment. */
  env?: Record<string, string>;
  /** The child's working directory (default: this process's). */
  cwd?: string;
  /** How long the start may take before it fails, in ms (default 30 000). */
  startTimeoutMs?: number;
  /** How long `stop()` waits after SIGTERM before SIGKILL, in ms (default 10 000). */
  stopTimeoutMs?: number;
}

export interface RunningChaosProxy {
  /** `http://127.0.0.1:PORT`: point the client under test here. */
  readonly url: string;
  /** The admin API's base URL. */
  readonly adminUrl: string;
  /** A ChaosClient of this proxy's admin API (with its token). */
  readonly client: ChaosClient;
  /** The child's process id. */
  readonly pid: number;
  /** The end of what the child wrote on stderr (its start-up line, its warnings). */
  stderr(): string;
  /** SIGTERM, then SIGKILL after `stopTimeoutMs`; resolves once the child has exited. */
  stop(): Promise<void>;
}

/** chaosproxy serve could not be started: the message says why, with the end of its stderr. */
export class ChaosProxyStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChaosProxyStartError";
  }
}

/** The start-up line: `… listening on http://HOST:PORT → …; admin: http://HOST:PORT; …`. */
const LISTENING = /listening on (http:\/\/\S+) .*?; admin: (http:\/\/[^;\s]+)/;
/** Lines of stderr kept for the errors. */
const TAIL = 40;

/** Every child still running, killed if this process exits without stopping them. */
const live = new Set<ChildProcess>();
let hooked = false;

function killLeftovers(): void {
  for (const child of live) child.kill("SIGKILL");
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

function serveArgs(options: ChaosProxyOptions): string[] {
  const args = ["-m", "chaosproxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "off"];
  const upstreams = options.upstream === undefined ? [] : [options.upstream].flat();
  for (const upstream of upstreams) args.push("--upstream", upstream);
  for (const path of options.scenarios ?? []) args.push("--scenarios", path);
  if (options.scenario !== undefined) args.push("--scenario", options.scenario);
  for (const path of options.mockFixtures ?? []) args.push("--mock-fixtures", path);
  if (options.seed !== undefined) args.push("--seed", String(options.seed));
  if (options.logContent === true) args.push("--log-content");
  args.push(...(options.args ?? []));
  return args;
}

/** Start `chaosproxy serve` on free local ports; resolves once its `/health` answers. */
export async function startChaosProxy(options: ChaosProxyOptions = {}): Promise<RunningChaosProxy> {
  const python = options.python ?? process.env.CHAOSPROXY_PYTHON ?? "python3";
  const startTimeoutMs = options.startTimeoutMs ?? 30_000;
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env };
  if (options.adminToken !== undefined) env.CHAOSPROXY_ADMIN_TOKEN = options.adminToken;
  else delete env.CHAOSPROXY_ADMIN_TOKEN;

  const child = spawn(python, serveArgs(options), {
    cwd: options.cwd,
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  live.add(child);
  child.once("exit", () => live.delete(child));
  if (!hooked) {
    hooked = true;
    process.once("exit", killLeftovers);
  }
  const lines: string[] = [];
  let partial = "";
  const stderr = (): string => [...lines, partial].join("\n").trim();
  let onLine: ((line: string) => void) | undefined;
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n");
    partial = parts.pop() ?? "";
    for (const line of parts) {
      lines.push(line);
      if (lines.length > TAIL) lines.shift();
      onLine?.(line);
    }
  });

  const stop = async (): Promise<void> => {
    // (no pid: it never started)
    if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const gone = exited(child);
    child.kill("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), stopTimeoutMs);
    });
    const how = await Promise.race([gone.then(() => "gone" as const), late]);
    clearTimeout(timer);
    if (how === "late") {
      child.kill("SIGKILL");
      await gone;
    }
  };

  let timer: NodeJS.Timeout | undefined;
  try {
    const [url, adminUrl] = await new Promise<[string, string]>((resolve, reject) => {
      timer = setTimeout(
        () => reject(new ChaosProxyStartError(`chaosproxy serve did not start within ${startTimeoutMs} ms:\n${stderr()}`)),
        startTimeoutMs,
      );
      onLine = (line) => {
        const found = LISTENING.exec(line);
        if (found !== null) resolve([found[1], found[2]]);
      };
      child.once("error", (exc) =>
        reject(
          new ChaosProxyStartError(
            `cannot run ${python} (${exc.message}): set CHAOSPROXY_PYTHON to the Python that has chaosproxy installed`,
          ),
        ),
      );
      child.once("exit", (code, signal) =>
        reject(
          new ChaosProxyStartError(
            `chaosproxy serve (${python}) exited (${signal ?? `code ${code}`}) before it listened:\n${stderr()}`,
          ),
        ),
      );
    });
    onLine = undefined;
    const client = new ChaosClient(adminUrl, { token: options.adminToken });
    const deadline = Date.now() + startTimeoutMs;
    for (;;) {
      try {
        await client.health();
        break;
      } catch (exc) {
        if (Date.now() >= deadline || child.exitCode !== null) {
          throw new ChaosProxyStartError(`chaosproxy serve at ${adminUrl} never answered /health (${String(exc)}):\n${stderr()}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    return { url, adminUrl, client, pid: child.pid ?? -1, stderr, stop };
  } catch (exc) {
    await stop();
    throw exc;
  } finally {
    clearTimeout(timer);
  }
}
