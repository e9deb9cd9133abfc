// The `openai` package, Chat Completions: chat.completions.create({stream: true}).
import OpenAI from "openai";
import { HEADERS, PROMPT, SDK_TIMEOUT_MS, URL_, run } from "./lib.mjs";

await run("openai-chat", async (rec) => {
  const client = new OpenAI({
    baseURL: `${URL_}/v1`,
    apiKey: "test",
    maxRetries: 0,
    timeout: SDK_TIMEOUT_MS, // the SDK's own timeout: does it cover the body? (it does not)
    defaultHeaders: HEADERS,
  });
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
