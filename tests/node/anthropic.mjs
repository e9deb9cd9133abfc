// `@anthropic-ai/sdk`: the messages.stream() helper, then finalMessage().
import Anthropic from "@anthropic-ai/sdk";
import { PROMPT, main, sdkOptions } from "./lib.mjs";

export async function body(rec, ctx) {
  const client = new Anthropic(sdkOptions(ctx.url, ctx));
  const stream = client.messages.stream({
    model: "claude-sonnet-4",
    max_tokens: 256,
    messages: [{ role: "user", content: PROMPT }],
  });
  for await (const event of stream) {
    if (event.type === "content_block_delta" && event.delta.type === "text_delta") {
      rec.events.push(`text:${event.delta.text}`);
      rec.text += event.delta.text;
    } else {
      rec.events.push(event.type);
    }
  }
  rec.final_iteration_done = true;
  const final = await stream.finalMessage();
  rec.final_text = final.content.map((b) => (b.type === "text" ? b.text : "")).join("");
  rec.stop_reason = final.stop_reason;
}

await main(import.meta.url, "anthropic", body);
