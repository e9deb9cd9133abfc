// The `openai` package, Chat Completions: chat.completions.create({stream: true}).
import OpenAI from "openai";
import { PROMPT, main, sdkOptions } from "./lib.mjs";

export async function body(rec, ctx) {
  // sdkOptions sets the SDK's own timeout: does it cover the body? (it does not)
  const client = new OpenAI(sdkOptions(`${ctx.url}/v1`, ctx));
  const stream = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: PROMPT }],
    stream: true,
  });
  for await (const chunk of stream) {
    const choice = chunk.choices?.[0];
    if (!choice) {
      rec.events.push("nochoice");
      continue;
    }
    if (choice.delta?.role) rec.events.push(`role:${choice.delta.role}`);
    if (choice.delta?.content) {
      rec.events.push(`text:${choice.delta.content}`);
      rec.text += choice.delta.content;
    }
    if (choice.finish_reason) rec.events.push(`finish:${choice.finish_reason}`);
  }
}

await main(import.meta.url, "openai-chat", body);
