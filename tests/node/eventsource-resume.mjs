// npm `eventsource` left to reconnect on its own (it is never closed on `[DONE]`): every
// connection it opens, the id and data of each message, and how it stopped. Used by
// tests/e2e/test_resume_node.py against each `resume:` policy.
//
//   CHAOS_PATH    the path to open (default /v1/chat/completions)
//   CHAOS_METHOD  GET (a plain SSE upstream) or POST (the mock: a chat request)
//   CHAOS_OPENS   stop after this many connections (default 8): a server that never
//                 answers 204 would otherwise be reconnected to for ever
import { EventSource } from "eventsource";
import { PROMPT, main } from "./lib.mjs";

const BODY = JSON.stringify({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: PROMPT }],
  stream: true,
});

export async function body(rec, ctx) {
  const path = ctx.env.CHAOS_PATH || "/v1/chat/completions";
  const method = ctx.env.CHAOS_METHOD || "POST";
  const opens = Number(ctx.env.CHAOS_OPENS || 8);
  rec.connections = [];
  rec.sent = [];
  rec.stopped = null;
  await new Promise((resolve) => {
    const es = new EventSource(`${ctx.url}${path}`, {
      fetch: (input, init) => {
        rec.sent.push(init.headers["Last-Event-ID"] ?? null);
        return ctx.fetch(input, {
          ...init,
          method,
          ...(method === "POST" ? { body: BODY } : {}),
          headers: { ...init.headers, ...ctx.headers, "Content-Type": "application/json" },
        });
      },
    });
    es.onopen = () => {
      rec.connections.push({ ids: [], datas: [] });
    };
    es.onmessage = (ev) => {
      const conn = rec.connections[rec.connections.length - 1];
      conn.ids.push(ev.lastEventId);
      conn.datas.push(ev.data);
    };
    es.onerror = (ev) => {
      if (es.readyState === EventSource.CLOSED) {
        // Failed for good (a 204, a non-200): EventSource does not reconnect.
        rec.stopped = { code: ev.code ?? null, message: ev.message ?? "" };
        resolve();
      } else if (rec.sent.length >= opens) {
        rec.stopped = { code: null, message: "gave up: too many connections" };
        es.close();
        resolve();
      }
    };
  });
}

await main(import.meta.url, "eventsource-resume", body);
