// The `openai` package, Responses: the responses.stream() helper, then finalResponse().
import OpenAI from "openai";
import { PROMPT, main, sdkOptions } from "./lib.mjs";

export async function body(rec, ctx) {
  const client = new OpenAI(sdkOptions(`${ctx.url}/v1`, ctx));
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
}

await main(import.meta.url, "openai-responses", body);
