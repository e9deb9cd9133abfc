// The `ws` package, a realtime client by hand: one user message, response.create, the
// text deltas assembled until response.done (then it closes with 1000). A close that
// comes first is recorded as the error {name: "Closed", code, message: its reason}
// (`ws` emits a close, not an error: a TCP cut with no close frame is code 1006).
import WebSocket from "ws";
import { PROMPT, main } from "./lib.mjs";

/** The WebSocket closed before response.done: its code and reason. */
export class Closed extends Error {}

export const ITEM = {
  type: "message",
  role: "user",
  content: [{ type: "input_text", text: PROMPT }],
};

/** The realtime URL of a run: ws://HOST:PORT/v1/realtime?model=gpt-realtime. */
export function realtimeUrl(ctx) {
  return `${ctx.url.replace(/^http/, "ws")}/v1/realtime?model=gpt-realtime`;
}

/** Mock knobs and the scenario: short answers, no pacing. */
export function realtimeHeaders(ctx) {
  return { ...ctx.headers, "X-Mock-Tokens": "4", "X-Mock-Interval-Ms": "0" };
}

export async function body(rec, ctx) {
  const ws = new WebSocket(realtimeUrl(ctx), { headers: realtimeHeaders(ctx) });
  await new Promise((resolve, reject) => {
    ws.on("open", () => {
      ws.send(JSON.stringify({ type: "conversation.item.create", item: ITEM }));
      ws.send(JSON.stringify({ type: "response.create" }));
    });
    ws.on("message", (data) => {
      const event = JSON.parse(data.toString("utf8"));
      if (event.type === "response.output_text.delta") {
        rec.events.push(`text:${event.delta}`);
        rec.text += event.delta;
      } else {
        rec.events.push(event.type);
      }
      if (event.type === "response.done") {
        ws.close(1000);
        resolve();
      }
    });
    ws.on("close", (code, reason) => {
      const error = new Closed(reason.toString("utf8"));
      error.code = code;
      reject(error);
    });
    ws.on("error", reject);
  });
}

await main(import.meta.url, "realtime-ws", body);
