// npm `eventsource` left to reconnect on its own (it is never closed on `[DONE]`): every
// connection it opens, the id and data of each message, and how it stopped. Used by
// tests/e2e/test_resume_node.py against each `resume:` policy.
//
//   CHAOS_PATH    the path to open (default /v1/chat/completions)
//   CHAOS_METHOD  GET (a plain SSE upstream) or POST (the mock: a chat request)
//   CHAOS_OPENS   stop after this many connections (default 8): a server that never
//                 answers 204 would otherwise be reconnected to for ever
import { EventSource } from "eventsource";
import { HEADERS, PROMPT, URL_, run } from "./lib.mjs";

const PATH = process.env.CHAOS_PATH || "/v1/chat/completions";
const METHOD = process.env.CHAOS_METHOD || "POST";
const OPENS = Number(process.env.CHAOS_OPENS || 8);
const BODY = JSON.stringify({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: PROMPT }],
  stream: true,
});

await run("eventsource-resume", async (rec) => {
  rec.connections = [];
  rec.sent = [];
  rec.stopped = null;
  await new Promise((resolve) => {
    const es = new EventSource(`${URL_}${PATH}`, {
      fetch: (input, init) => {
        rec.sent.push(init.headers["Last-Event-ID"] ?? null);
        return fetch(input, {
          ...init,
          method: METHOD,
          ...(METHOD === "POST" ? { body: BODY } : {}),
          headers: { ...init.headers, ...HEADERS, "Content-Type": "application/json" },
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
      } else if (rec.sent.length >= OPENS) {
        rec.stopped = { code: null, message: "gave up: too many connections" };
        es.close();
        resolve();
      }
    };
  });
});
