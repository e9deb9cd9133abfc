// A `chaosproxy matrix` client: the Node `openai` SDK, as an application uses it.
//
// Streams one chat completion from $CHAOSPROXY_URL/v1 (any API key: the built-in mock
// takes any), prints the assembled text on stdout and exits 0; when the SDK throws,
// prints the error on stderr and exits 1. The SDK keeps its defaults.
//
//   chaosproxy matrix --client "node examples/clients/openai_node.mjs"
//
// It imports `openai` from wherever Node finds it (npm install openai next to your
// copy), and otherwise from this repository's tests/node/node_modules (installed by
// `npm ci --prefix tests/node`), so it runs from a checkout as it is.

async function loadOpenAI() {
  try {
    return (await import("openai")).default;
  } catch (err) {
    if (err?.code !== "ERR_MODULE_NOT_FOUND") throw err;
    const local = new URL("../../tests/node/node_modules/openai/index.mjs", import.meta.url);
    return (await import(local.href)).default;
  }
}

function finish(code, out, err) {
  if (err) process.stderr.write(err + "\n");
  // Exit explicitly once stdout is written: a body that never ends (a hang after the
  // last event) must not keep the process alive after the SDK has finished.
  process.stdout.write(out, () => process.exit(code));
}

const OpenAI = await loadOpenAI();
const client = new OpenAI({
  baseURL: process.env.CHAOSPROXY_URL.replace(/\/+$/, "") + "/v1",
  apiKey: process.env.OPENAI_API_KEY || "dummy",
});
let text = "";
let failure = null;
try {
  const stream = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Plan my week, please." }],
    stream: true,
  });
  for await (const chunk of stream) {
    for (const choice of chunk.choices ?? []) {
      if (choice.delta?.content) text += choice.delta.content;
    }
  }
} catch (err) {
  failure = `${err?.constructor?.name ?? "Error"}: ${err?.message ?? err}`;
}
if (failure === null) finish(0, text);
else finish(1, "", failure);
