// urql (@urql/core) with its defaults against the server at argv[2] (a demo
// run, argv[3]): short queries go by GET (preferGetMethod "within-url-limit"),
// long ones by POST, and the document cache is seen going stale after
// WriteNote (writeRunLog answers a Boolean, so nothing names a type to
// invalidate) unless the mutation names RunLogPage in additionalTypenames,
// as docs/clients.md says.
import { Client, cacheExchange, fetchExchange } from "@urql/core";
import { operation, report } from "./operations.mjs";

const [url, runId] = process.argv.slice(2);
const methods = [];
// Only watches: every request still goes out through Node's own fetch.
const watching = (input, init) => {
  methods.push(init?.method ?? "GET");
  return fetch(input, init);
};
const client = new Client({ url, exchanges: [cacheExchange, fetchExchange], fetch: watching });

const RunLogPage = operation("RunLogPage");
const RunLog = operation("RunLog");
const WriteNote = operation("WriteNote");

async function notes() {
  const result = await client.query(RunLogPage, { runId, limit: 500 }).toPromise();
  if (result.error) throw result.error;
  return result.data.runLog.nodes.filter((line) => line.kind === "NOTE").length;
}

const page = await client.query(RunLogPage, { runId }).toPromise();
const pageMethod = methods.at(-1);
const full = await client.query(RunLog, { runId, limit: 3 }).toPromise();
const fullMethod = methods.at(-1);

const before = await notes();
await client.mutation(WriteNote, { runId, text: "written from urql" }).toPromise();
const staleAfterWrite = await notes(); // cache-first: the same answer as before
await client
  .mutation(WriteNote, { runId, text: "and again" }, { additionalTypenames: ["RunLogPage"] })
  .toPromise();
const freshAfterWrite = await notes();

report({
  pageError: page.error?.message ?? null,
  pageLines: page.data?.runLog.nodes.length ?? null,
  pageMethod,
  fullError: full.error?.message ?? null,
  fullTypenames: full.data?.runLog.nodes.map((line) => line.detail?.__typename ?? null) ?? null,
  fullMethod,
  notes: { before, staleAfterWrite, freshAfterWrite },
  requests: methods.length,
});
