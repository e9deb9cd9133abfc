// The `openai` package, Chat Completions with a tool: chat.completions.create({stream:
// true, tools}). It assembles each tool call's arguments by index, as the SDK's docs
// show, then parses them (an agent would call the tool with them): a call whose
// arguments are not JSON is an error. The record's `calls` holds {index: {name, arguments,
// parsed}}. Without CHAOS_SCENARIO it sends no X-Chaos-Scenario: the proxy's default applies.
import OpenAI from "openai";
import { main, sdkOptions } from "./lib.mjs";

export async function body(rec, ctx) {
  const headers = ctx.env.CHAOS_SCENARIO ? ctx.headers : {};
  const client = new OpenAI(sdkOptions(`${ctx.url}/v1`, ctx, headers));
  const stream = await client.chat.completions.create({
    model: "gpt-4o",
    messages: [{ role: "user", content: "What's the weather in Paris and in Tokyo?" }],
    tools: [
      {
        type: "function",
        function: {
          name: "get_weather",
          parameters: { type: "object", properties: { city: { type: "string" } } },
        },
      },
    ],
    stream: true,
  });
  const calls = {};
  rec.calls = calls;
  for await (const chunk of stream) {
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    if (choice.delta?.content) rec.text += choice.delta.content;
    for (const call of choice.delta?.tool_calls ?? []) {
      const entry = (calls[call.index] ??= { name: "", arguments: "" });
      if (call.function?.name) entry.name += call.function.name;
      if (call.function?.arguments) entry.arguments += call.function.arguments;
    }
    if (choice.finish_reason) rec.events.push(`finish:${choice.finish_reason}`);
  }
  for (const entry of Object.values(calls)) entry.parsed = JSON.parse(entry.arguments);
}

await main(import.meta.url, "openai-tools", body);
