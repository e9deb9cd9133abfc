// The `openai` package, Responses: the responses.stream() helper, then finalResponse().
import OpenAI from "openai";
import { HEADERS, PROMPT, SDK_TIMEOUT_MS, URL_, run } from "./lib.mjs";

await run("openai-responses", async (rec) => {
  const client = new OpenAI({
    baseURL: `${URL_}/v1`,
    apiKey: "test",
    maxRetries: 0,
    timeout: SDK_TIMEOUT_MS,
    defaultHeaders: HEADERS,
  });
  const stream = client.responses.stream({ model: "gpt-4o-mini", input: PROMPT });
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") {
      rec.events.push(`text:${event.delta}`);
      rec.text += event.delta;
    } else {
      rec.events.push(event.type);
    }
  }
  rec.final_iteration_done = true;
  const final = await stream.finalResponse();
  rec.final_text = final.output_text;
});
