// The `openai` package, Chat Completions: chat.completions.create({stream: true}).
import OpenAI from "openai";
import { PROMPT, URL_, run, sdkOptions } from "./lib.mjs";

await run("openai-chat", async (rec) => {
  // sdkOptions sets the SDK's own timeout: does it cover the body? (it does not)
  const client = new OpenAI(sdkOptions(`${URL_}/v1`));
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
});
