/**
 * ChaosClient against hostile admin APIs (a node:http server standing in for one):
 * an error page that is no JSON, an answer that is no JSON, one that never comes, one
 * cut short. Each is a ChaosClientError that says what happened, never a raw TypeError
 * or SyntaxError; what the client sends is what the admin API expects.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { afterAll, beforeAll, expect, test } from "vitest";

import { ChaosClient, ChaosClientError } from "../src/index.js";

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

let server: Server;
let base = "";
let handler: Handler = (_req, res) => res.end("{}");
const seen: { method: string; url: string; headers: IncomingMessage["headers"]; body: string }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      handler(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

async function failure(call: Promise<unknown>): Promise<ChaosClientError> {
  const error = await call.then(
    () => undefined,
    (exc: unknown) => exc,
  );
  expect(error).toBeInstanceOf(ChaosClientError);
  return error as ChaosClientError;
}

test("what the client sends: the token, JSON or YAML by the body, the query", async () => {
  handler = (req, res) => {
    res.setHeader("content-type", "application/json");
    res.end(req.url?.startsWith("/requests") ? '{"requests": [], "next": null}' : '{"name": "n", "default": null}');
  };
  const client = new ChaosClient(base + "/", { token: "tok" });
  seen.length = 0;
  await client.addScenario("faults: []\n", "n");
  await client.addScenario({ name: "n", faults: [] });
  await client.use(null);
  await client.requestPage({ limit: 5, scenario: "a b", model: "gpt-*", maxBytes: 100, cursor: "7" });
  await client.reset();
  expect(seen.map((s) => [s.method, s.url, s.headers["content-type"] ?? null, s.body])).toEqual([
    ["POST", "/scenarios?name=n", "application/yaml", "faults: []\n"],
    ["POST", "/scenarios", "application/json", '{"name":"n","faults":[]}'],
    ["PUT", "/default", "application/json", '{"scenario":null}'],
    ["GET", "/requests?model=gpt-*&scenario=a+b&limit=5&cursor=7&max_bytes=100", null, ""],
    ["POST", "/reset", null, ""],
  ]);
  expect(seen.every((s) => s.headers.authorization === "Bearer tok")).toBe(true);
});

test("an error page that is no JSON: the status, and the method and URL", async () => {
  handler = (_req, res) => {
    res.statusCode = 502;
    res.setHeader("content-type", "text/html");
    res.end("<html><body>Bad Gateway</body></html>");
  };
  const error = await failure(new ChaosClient(base).scenarios());
  expect(error.status).toBe(502);
  expect(error.message).toBe(`GET ${base}/scenarios: 502`);
  expect(error.problems).toEqual([]);
});

test("a 200 that is no JSON says so, with the start of it", async () => {
  handler = (_req, res) => res.end("<html>" + "x".repeat(500));
  const error = await failure(new ChaosClient(base).health());
  expect(error.message).toBe(`GET ${base}/health: the answer is not JSON: ${JSON.stringify(`<html>${"x".repeat(194)}…`)}`);
});

test("an answer that never comes ends at timeoutMs", async () => {
  handler = () => undefined; // never answers
  const started = Date.now();
  const error = await failure(new ChaosClient(base, { timeoutMs: 300 }).health());
  expect(Date.now() - started).toBeGreaterThanOrEqual(290); // (timer and clock granularity)
  expect(error.status).toBe(0);
  expect(error.message).toBe(
    `cannot reach the chaosproxy admin API at ${base}: The operation was aborted due to timeout`,
  );
});

test("an answer cut short is a ChaosClientError with its status", async () => {
  handler = (_req, res) => {
    res.writeHead(200, { "content-type": "application/json", "content-length": "100" });
    res.write('{"status": "o');
    setImmediate(() => res.socket?.destroy());
  };
  const error = await failure(new ChaosClient(base).health());
  expect(error.status).toBe(200);
  expect(error.message).toMatch(new RegExp(`^GET ${base}/health: the answer was cut: `));
});
