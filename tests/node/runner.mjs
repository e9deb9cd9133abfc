// Many client runs in one Node process (tests/clients/node.py drives it): a client's
// modules are imported once, not once a run (an SDK costs 0.3 s of CPU to import). Each
// run keeps what a process of its own had:
//   - its settings: the job's environment, not the runner's;
//   - its connections: an undici Agent of its own (Node's fetch, given that dispatcher),
//     destroyed when the run ends, so no connection is shared by two runs or outlives one;
//   - its deadline (lib.mjs's execute), after which nothing it does is seen.
//
// stdin: a job a line, {"id", "client", "env"}; jobs run at once, as processes would.
// stdout: a line a job as it ends, {"id", "line"} (the client's record line) or
// {"id", "failure"} (the script itself failed: a bug, not a client's behaviour).
import { createInterface } from "node:readline";
import { execute, settings } from "./lib.mjs";

// Node 20 bundles undici without exporting it: its first fetch makes the global
// dispatcher, an undici Agent, whose class gives each run a pool of its own.
await fetch("http://127.0.0.1:0/").catch(() => {});
const Agent = globalThis[Symbol.for("undici.globalDispatcher.1")]?.constructor;
if (typeof Agent !== "function") throw new Error("no undici Agent behind this Node's fetch");

// A run's body may reject after its deadline, once its connections are destroyed: that
// run is over, and the runner goes on (a process of its own had exited by then).
process.on("unhandledRejection", (err) => {
  process.stderr.write(`runner: after its run: ${err?.stack ?? err}\n`);
});

function reply(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

async function run({ id, client, env }) {
  const agent = new Agent();
  try {
    const { body } = await import(`./${client}.mjs`);
    const ctx = settings(env, (input, init) => fetch(input, { ...init, dispatcher: agent }));
    reply({ id, line: await execute(client, body, ctx) });
  } catch (err) {
    reply({ id, failure: String(err?.stack ?? err) });
  } finally {
    agent.destroy().catch(() => {});
  }
}

for await (const text of createInterface({ input: process.stdin })) {
  if (text.trim()) run(JSON.parse(text));
}
