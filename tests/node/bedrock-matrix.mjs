// A `chaosproxy matrix` client (the command protocol of docs/verdicts.md):
// @aws-sdk/client-bedrock-runtime streaming one answer through the proxy
// (CHAOSPROXY_URL), `converse` (ConverseStreamCommand, the default) or `invoke`
// (InvokeModelWithResponseStreamCommand), as an application would: it joins the text
// deltas and trusts the SDK to throw on a broken stream. Prints the text on stdout and
// exits 0, or prints the text it had, and the error (name, $fault, message) on stderr,
// and exits 1.
import { Agent } from "node:http";
import { OPS, bedrockClient, command, read } from "./bedrock.mjs";

const OP = process.argv[2] || "converse";
if (!OPS.includes(OP)) {
  process.stderr.write(`unknown operation ${OP}: ${OPS.join(", ")}\n`);
  process.exit(2);
}
const ctx = { url: (process.env.CHAOSPROXY_URL || "").replace(/\/+$/, ""), sdkTimeoutMs: 10000 };
const agent = new Agent({ keepAlive: true });
const client = bedrockClient(ctx, agent, {});
const rec = { text: "", events: [], tools: [], stop: null };
let failure = null;
try {
  await read(OP, await client.send(command(OP)), rec);
} catch (err) {
  failure = `${err?.name ?? "Error"} ($fault ${err?.$fault ?? "none"}): ${err?.message ?? err}`;
} finally {
  client.destroy();
  agent.destroy();
}
process.stdout.write(rec.text, () => {
  if (failure === null) process.exit(0);
  process.stderr.write(`${failure}\n`, () => process.exit(1));
});
