// The Vercel `ai` SDK with `@ai-sdk/openai` (Chat Completions): streamText().fullStream.
import { createOpenAI } from "@ai-sdk/openai";
import { streamText } from "ai";
import { PROMPT, describeError, main } from "./lib.mjs";

export async function body(rec, ctx) {
  const provider = createOpenAI({
    baseURL: `${ctx.url}/v1`,
    apiKey: "test",
    headers: ctx.headers,
    fetch: ctx.fetch,
  });
  const result = streamText({
    model: provider.chat("gpt-4o-mini"),
    prompt: PROMPT,
    maxRetries: 0,
  });
  for await (const part of result.fullStream) {
    if (part.type === "text-delta") {
      const piece = part.text ?? part.delta ?? part.textDelta;
      rec.events.push(`text:${piece}`);
      rec.text += piece;
    } else if (part.type === "finish") {
      rec.events.push(`finish:${part.finishReason?.unified ?? part.finishReason}`);
    } else if (part.type === "error") {
      rec.events.push("error");
      rec.stream_error = describeError(part.error);
    } else {
      rec.events.push(part.type);
    }
  }
}

await main(import.meta.url, "ai-sdk", body);
