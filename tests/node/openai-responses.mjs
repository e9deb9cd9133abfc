// The `openai` package, Responses: the responses.stream() helper, then finalResponse().
import OpenAI from "openai";
import { PROMPT, URL_, run, sdkOptions } from "./lib.mjs";

await run("openai-responses", async (rec) => {
  const client = new OpenAI(sdkOptions(`${URL_}/v1`));
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
