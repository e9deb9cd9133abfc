// npm `eventsource` (the WHATWG EventSource), POSTing through its `fetch` option; the
// application closes it on `[DONE]`, as an EventSource user must (it would reconnect).
import { EventSource } from "eventsource";
import { PROMPT, main } from "./lib.mjs";

class EventSourceError extends Error {
  constructor(message, code) {
    super(message);
    if (code !== undefined) this.code = code;
  }
}

const BODY = JSON.stringify({
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: PROMPT }],
  stream: true,
});

export async function body(rec, ctx) {
  await new Promise((resolve, reject) => {
    const es = new EventSource(`${ctx.url}/v1/chat/completions`, {
      fetch: (input, init) =>
        ctx.fetch(input, {
          ...init,
          method: "POST",
          body: BODY,
          headers: { ...init.headers, ...ctx.headers, "Content-Type": "application/json" },
        }),
    });
    es.onmessage = (ev) => {
      if (ev.data === "[DONE]") {
        rec.events.push("[DONE]");
        es.close();
        resolve();
        return;
      }
      let chunk;
      try {
        chunk = JSON.parse(ev.data);
      } catch {
        // EventSource hands any data over; it is the application that cannot parse it.
        rec.events.push("unparsable");
        return;
      }
      if (chunk.error) {
        // An in-stream error is just another message to EventSource: the app must look.
        rec.events.push(`error:${chunk.error.type}`);
        return;
      }
      const choice = chunk.choices?.[0];
      if (choice?.delta?.role) rec.events.push(`role:${choice.delta.role}`);
      if (choice?.delta?.content) {
        rec.events.push(`text:${choice.delta.content}`);
        rec.text += choice.delta.content;
      }
      if (choice?.finish_reason) rec.events.push(`finish:${choice.finish_reason}`);
    };
    es.onerror = (ev) => {
      // The body ended (or broke) without [DONE]: EventSource would reconnect. Stop.
      rec.events.push(`error(readyState=${es.readyState})`);
      const err = new EventSourceError(ev.message || "", ev.code);
      es.close();
      reject(err);
    };
  });
}

await main(import.meta.url, "eventsource", body);
