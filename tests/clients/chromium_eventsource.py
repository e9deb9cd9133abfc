"""A `chaosproxy matrix` client: headless Chromium's own ``EventSource`` reading an
OpenAI Chat stream (the mock's ``GET /v1/chat/completions?q=`` route: an EventSource can
only GET), left to reconnect on its own, as an application in three ways (the first
argument), exactly as tests/node/eventsource-matrix.mjs:

- ``naive``: appends every delta it is given, across reconnects; raises on an error
  event, on a payload that is not JSON, and when the stream stops for good before
  ``[DONE]`` (a 204, a non-200 answer);
- ``dedup``: the same, but applies each event id once;
- ``lenient``: accepts whatever it got when the stream stops for good, skips what it
  cannot parse.

It stops (closing the EventSource) at the first ``[DONE]``. Prints the text on stdout
and exits 0, or the error on stderr and exits 1. Reads CHAOSPROXY_URL; needs Chromium
(tests/support/browser.py finds it), or ``CHAOSPROXY_TEST_CHROMIUM``: the DevTools URL of one
running, where it opens its page in a browser context of its own.

    chaosproxy matrix --client "python -m tests.clients.chromium_eventsource dedup"
"""

from __future__ import annotations

import asyncio
import os
import sys
from urllib.parse import urlencode

import orjson

from tests.support.browser import Chromium, find_chromium

PROMPT = "Plan my week, please."
#: The DevTools URL of a running Chromium (tests/support/browser.py's ``shared_chromium``,
#: started with --disable-web-security) to open the page in.
SHARED = "CHAOSPROXY_TEST_CHROMIUM"
MODES = ("naive", "dedup", "lenient")

PAGE = """<!doctype html>
<meta charset="utf-8"><title>matrix</title>
<script>
const MODE = %(mode)s;
window.result = null;
let text = "";
const seen = new Set();
let opens = 0;
class StreamError extends Error { constructor(m) { super(m); this.name = "StreamError"; } }
function finish(error) {
  if (window.result) return;
  if (error && !(MODE === "lenient" && error instanceof StreamError)) {
    window.result = {ok: false, error: `${error.name}: ${error.message}`};
  } else {
    window.result = {ok: true, text};
  }
}
const es = new EventSource(%(url)s);
es.onopen = () => { opens += 1; };
es.onmessage = (ev) => {
  if (MODE === "dedup" && ev.lastEventId) {
    if (seen.has(ev.lastEventId)) return;
    seen.add(ev.lastEventId);
  }
  if (ev.data === "[DONE]") { es.close(); finish(null); return; }
  let chunk;
  try { chunk = JSON.parse(ev.data); } catch (err) {
    if (MODE === "lenient") return;
    es.close(); finish(err); return;
  }
  if (chunk.error) {
    es.close();
    finish(new Error("the provider reported an error: " + JSON.stringify(chunk.error)));
    return;
  }
  for (const choice of chunk.choices || []) {
    const content = choice.delta && choice.delta.content;
    if (content) text += content;
  }
};
es.onerror = () => {
  if (es.readyState === EventSource.CLOSED) {
    finish(new StreamError("the stream stopped before [DONE]"));
  } else if (opens >= 10) {
    es.close();
    finish(new StreamError(`gave up after ${opens} connections without [DONE]`));
  }
};
</script>
"""


async def run(mode: str, base: str) -> dict[str, object]:
    executable = find_chromium()
    if executable is None:
        raise RuntimeError("Chromium is not installed")
    query = urlencode({"q": PROMPT, "model": "gpt-4o-mini"})
    page = PAGE % {
        "mode": orjson.dumps(mode).decode(),
        "url": orjson.dumps(f"{base}/v1/chat/completions?{query}").decode(),
    }
    # A browser context of its own in the suite's running Chromium when it names one
    # (SHARED), else a Chromium of its own.
    attach = os.environ.get(SHARED) or None
    async with Chromium(executable=executable, disable_web_security=True, attach=attach) as browser:
        tab = await browser.write(page)
        await tab.wait_for("window.result !== null", limit=3600)
        result: dict[str, object] = await tab.evaluate("window.result")
        return result


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "naive"
    if mode not in MODES:
        print(f"unknown mode {mode}: {', '.join(MODES)}", file=sys.stderr)
        return 2
    result = asyncio.run(run(mode, os.environ["CHAOSPROXY_URL"].rstrip("/")))
    if not result["ok"]:
        print(result["error"], file=sys.stderr)
        return 1
    sys.stdout.buffer.write(str(result["text"]).encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
