// @aws-sdk/client-bedrock-runtime: ConverseStreamCommand (CHAOS_BEDROCK_OP=converse, the
// default; converse-tool asks for a tool call) or InvokeModelWithResponseStreamCommand
// of an Anthropic model (invoke), with the endpoint at the proxy, dummy credentials and
// region us-east-1; X-Chaos-Scenario is added after signing (the signature does not
// cover it); CHAOS_BEDROCK_SIGN_FOR=URL signs each request for that endpoint and sends
// it to the proxy (CHAOS_URL) instead. The SDK reads over node:http, not fetch (its
// default handler speaks HTTP/2): each run gets an http.Agent of its own, destroyed when
// the run ends.
//
// The line, beyond lib.mjs's: op; path, headers and body: the request as the SDK signed
// it (its headers without X-Chaos-Scenario; the body, for the mock's answer to be
// computed from); tools ([{id, name, input}], input the joined fragments); stop
// (messageStop's stopReason, or Anthropic's message_delta stop_reason); fault (the
// error's $fault: "client" or "server", or null). events: Converse's event names
// ("text:…" a text delta, "tool:…" a toolUse input fragment, "toolUse:NAME" its
// contentBlockStart, "messageStop:end_turn"), or Invoke's chunk types ("text:…" a text
// delta).
import { Agent } from "node:http";
import {
  BedrockRuntimeClient,
  ConverseStreamCommand,
  InvokeModelWithResponseStreamCommand,
} from "@aws-sdk/client-bedrock-runtime";
import { NodeHttpHandler } from "@smithy/node-http-handler";
import { PROMPT, main } from "./lib.mjs";

export const MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0";
export const OPS = ["converse", "converse-tool", "invoke"];

export const TOOL = {
  toolSpec: {
    name: "get_weather",
    description: "The weather in a city.",
    inputSchema: {
      json: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  },
};

/**
 * A Bedrock runtime client at the proxy; `sent` receives each request as signed. With
 * `signFor` (a URL), each request is signed for that endpoint and then sent to the proxy
 * instead (docs/providers.md, "SigV4 and Host").
 */
export function bedrockClient(ctx, agent, headers, sent, signFor = null) {
  const client = new BedrockRuntimeClient({
    region: "us-east-1",
    endpoint: signFor ?? ctx.url,
    credentials: {
      accessKeyId: "AKIAIOSFODNN7EXAMPLE",
      secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    },
    maxAttempts: 1,
    // (the client's default handler speaks HTTP/2, which the proxy does not)
    requestHandler: new NodeHttpHandler({ httpAgent: agent, requestTimeout: ctx.sdkTimeoutMs }),
  });
  client.middlewareStack.addRelativeTo(
    (next) => async (args) => {
      const signed = { ...args.request.headers };
      if (signFor) {
        const proxy = new URL(ctx.url);
        args.request.protocol = proxy.protocol;
        args.request.hostname = proxy.hostname;
        args.request.port = Number(proxy.port);
      }
      Object.assign(args.request.headers, headers);
      const sentBody = args.request.body;
      const text = typeof sentBody === "string" ? sentBody : new TextDecoder().decode(sentBody);
      if (sent) sent.push({ path: args.request.path, headers: signed, body: text });
      return next(args);
    },
    { name: "chaosHeaders", relation: "after", toMiddleware: "httpSigningMiddleware" },
  );
  return client;
}

export function command(op) {
  if (op === "invoke") {
    const payload = {
      anthropic_version: "bedrock-2023-05-31",
      max_tokens: 200,
      messages: [{ role: "user", content: PROMPT }],
    };
    return new InvokeModelWithResponseStreamCommand({
      modelId: MODEL,
      contentType: "application/json",
      body: new TextEncoder().encode(JSON.stringify(payload)),
    });
  }
  const input = { modelId: MODEL, messages: [{ role: "user", content: [{ text: PROMPT }] }] };
  if (op === "converse-tool") {
    input.toolConfig = { tools: [TOOL], toolChoice: { tool: { name: "get_weather" } } };
  }
  return new ConverseStreamCommand(input);
}

/** Read one answer into `rec` (text, events, tools, stop) as it arrives. */
export async function read(op, reply, rec) {
  if (op === "invoke") {
    for await (const event of reply.body) {
      if (!event.chunk) {
        rec.events.push(Object.keys(event).join(","));
        continue;
      }
      const chunk = JSON.parse(new TextDecoder().decode(event.chunk.bytes));
      if (chunk.type === "content_block_delta" && chunk.delta?.type === "text_delta") {
        rec.events.push(`text:${chunk.delta.text}`);
        rec.text += chunk.delta.text;
      } else {
        rec.events.push(chunk.type);
      }
      if (chunk.type === "message_delta" && chunk.delta?.stop_reason) {
        rec.stop = chunk.delta.stop_reason;
      }
    }
    return;
  }
  for await (const event of reply.stream) {
    const [name] = Object.keys(event).filter((key) => event[key] !== undefined);
    const value = event[name];
    if (name === "contentBlockStart" && value.start?.toolUse) {
      const { toolUseId, name: tool } = value.start.toolUse;
      rec.tools.push({ id: toolUseId, name: tool, input: "" });
      rec.events.push(`toolUse:${tool}`);
    } else if (name === "contentBlockDelta" && value.delta?.text !== undefined) {
      rec.events.push(`text:${value.delta.text}`);
      rec.text += value.delta.text;
    } else if (name === "contentBlockDelta" && value.delta?.toolUse) {
      rec.events.push(`tool:${value.delta.toolUse.input}`);
      rec.tools[rec.tools.length - 1].input += value.delta.toolUse.input;
    } else if (name === "messageStop") {
      rec.stop = value.stopReason;
      rec.events.push(`messageStop:${value.stopReason}`);
    } else {
      rec.events.push(name);
    }
  }
}

export async function body(rec, ctx) {
  const op = ctx.env.CHAOS_BEDROCK_OP || "converse";
  if (!OPS.includes(op)) throw new Error(`CHAOS_BEDROCK_OP: ${op} is not one of ${OPS}`);
  Object.assign(rec, { op, path: null, headers: null, body: null, tools: [], stop: null, fault: null });
  const agent = new Agent({ keepAlive: true });
  const sent = [];
  const client = bedrockClient(ctx, agent, ctx.headers, sent, ctx.env.CHAOS_BEDROCK_SIGN_FOR);
  try {
    const reply = await client.send(command(op));
    Object.assign(rec, sent.at(-1));
    await read(op, reply, rec);
  } catch (err) {
    Object.assign(rec, sent.at(-1) ?? {});
    rec.fault = err?.$fault ?? null;
    throw err;
  } finally {
    client.destroy();
    agent.destroy();
  }
}

await main(import.meta.url, "bedrock", body);
