// graphql-ws's own client (the graphql-transport-ws protocol) for the shipped
// RunLogTail, against the server at argv[2] (a demo run, argv[3]): from a
// page's startCursor as `since`, a note written after it arrives on the tail,
// whenever the subscription started. Node 20 has no WebSocket of its own: the
// `ws` package is the one graphql-ws documents for Node.
import { print } from "graphql";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { operation, report } from "./operations.mjs";

const [url, runId] = process.argv.slice(2);
const text = `tailed ${process.pid}`;

async function post(document, variables) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/graphql-response+json" },
    body: JSON.stringify({ query: print(document), variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

const page = await post(operation("RunLog"), { runId, limit: 1 });
const since = page.runLog.pageInfo.startCursor;
const client = createClient({ url: url.replace(/^http/, "ws"), webSocketImpl: WebSocket, lazy: true });
const seen = [];
const arrived = new Promise((resolve, reject) => {
  const stop = client.subscribe(
    { query: print(operation("RunLogTail")), variables: { runId, since } },
    {
      next: ({ data, errors }) => {
        if (errors) return reject(new Error(JSON.stringify(errors)));
        seen.push(data.runLogTail);
        if (data.runLogTail.detail?.text === text) {
          stop();
          resolve();
        }
      },
      error: (error) => reject(error instanceof Error ? error : new Error(JSON.stringify(error))),
      complete: () => {},
    },
  );
});
const written = await post(operation("WriteNote"), { runId, text });
await arrived;
await client.dispose();
report({
  written: written.writeRunLog,
  seen: seen.map((line) => ({ kind: line.kind, text: line.detail?.text ?? null, hasCursor: !!line.cursor })),
});
