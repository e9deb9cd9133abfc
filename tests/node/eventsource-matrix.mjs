// A `chaosproxy matrix` client (the command protocol of docs/verdicts.md): npm
// `eventsource` reading an OpenAI Chat stream, left to reconnect on its own, as an
// application in three ways (the first argument):
//
//   naive    appends every delta it is given, across reconnects; raises on an error
//            event, on a payload that is not JSON, and when the stream stops for good
//            before [DONE] (a 204, a non-200 answer)
//   dedup    the same, but applies each event id once (what docs/reconnection.md asks
//            under replay_last and restart)
//   lenient  accepts whatever it got when the stream stops for good; skips what it
//            cannot parse
//
// It stops (closing the EventSource) at the first [DONE]. Prints the text on stdout and
// exits 0, or prints the error on stderr and exits 1. Reads CHAOSPROXY_URL.
import { EventSource } from "eventsource";

const MODE = process.argv[2] || "naive";
if (!["naive", "dedup", "lenient"].includes(MODE)) {
  process.stderr.write(`unknown mode ${MODE}: naive, dedup or lenient\n`);
  process.exit(2);
}
const URL_ = (process.env.CHAOSPROXY_URL || "").replace(/\/+$/, "");
const BODY = JSON.stringify({
  model: "gpt-4o-mini",
  stream: true,
  messages: [{ role: "user", content: "Plan my week, please." }],
});
// A server that never says 204 would be reconnected to for ever.
const MAX_OPENS = 10;

class StreamError extends Error {
  constructor(message) {
    super(message);
    this.name = "StreamError";
  }
}

let text = "";
const seen = new Set();
let opens = 0;
// eventsource waits for its reconnection on an unref'd timer: without this, Node would
// exit between a cut and the reconnect. (The matrix's --timeout bounds the run.)
setInterval(() => {}, 60_000);

function finish(error) {
  if (error) {
    if (MODE === "lenient" && error instanceof StreamError) {
      process.stdout.write(text, () => process.exit(0));
      return;
    }
    process.stderr.write(`${error.name}: ${error.message}\n`, () => process.exit(1));
    return;
  }
  process.stdout.write(text, () => process.exit(0));
}

const es = new EventSource(`${URL_}/v1/chat/completions`, {
  fetch: (input, init) => {
    opens += 1;
    return fetch(input, {
      ...init,
      method: "POST",
      body: BODY,
      headers: { ...init.headers, "Content-Type": "application/json", Authorization: "Bearer test" },
    });
  },
});
es.onmessage = (ev) => {
  if (process.env.DEBUG_ES) process.stderr.write(`msg ${ev.lastEventId} ${ev.data.slice(0, 40)}\n`);
  if (MODE === "dedup" && ev.lastEventId) {
    if (seen.has(ev.lastEventId)) return;
    seen.add(ev.lastEventId);
  }
  if (ev.data === "[DONE]") {
    es.close();
    finish(null);
    return;
  }
  let chunk;
  try {
    chunk = JSON.parse(ev.data);
  } catch (err) {
    if (MODE === "lenient") return;
    es.close();
    finish(err);
    return;
  }
  if (chunk.error) {
    es.close();
    finish(new Error(`the provider reported an error: ${JSON.stringify(chunk.error)}`));
    return;
  }
  for (const choice of chunk.choices || []) {
    const content = choice.delta && choice.delta.content;
    if (content) text += content;
  }
};
es.onerror = (ev) => {
  if (process.env.DEBUG_ES) process.stderr.write(`err ${es.readyState} ${ev.code} ${ev.message}\n`);
  if (es.readyState === EventSource.CLOSED) {
    const why = ev.code ? `status ${ev.code}` : ev.message || "closed";
    finish(new StreamError(`the stream stopped before [DONE] (${why})`));
  } else if (opens >= MAX_OPENS) {
    es.close();
    finish(new StreamError(`gave up after ${opens} connections without [DONE]`));
  }
};
