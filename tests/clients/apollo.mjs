// Apollo Client 4 with an InMemoryCache, as docs/clients.md sets it up, against
// the server at argv[2] (a demo run, argv[3]): reads the shipped RunLog, pages
// older with `after` and newer with `before` through fetchMore, and counts
// every warning Apollo logs. The same read through a default InMemoryCache
// (no possibleTypes) is counted too, to show what the generated file saves.
import { readFileSync } from "node:fs";
import { ApolloClient, HttpLink, InMemoryCache } from "@apollo/client";
import { operation, report } from "./operations.mjs";

const [url, runId] = process.argv.slice(2);
const generated = new URL("../../clients/ts/src/generated/possible-types.json", import.meta.url);
const { possibleTypes } = JSON.parse(readFileSync(generated, "utf8"));
const RunLog = operation("RunLog");
const WriteNote = operation("WriteNote");

const warnings = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => warnings.push(args.map(String).join(" ").slice(0, 300));
}

/** Pages of one run (and kinds filter) merged into one list, whichever way they were read. */
function mergeRunLog(existing, incoming, { args }) {
  if (!existing) return incoming;
  if (args?.before) {
    // Newer lines: in front, and the newest cursor is theirs (unless there were none).
    return {
      ...existing,
      nodes: [...incoming.nodes, ...existing.nodes],
      pageInfo: {
        ...existing.pageInfo,
        startCursor: incoming.pageInfo.startCursor ?? existing.pageInfo.startCursor,
        hasPreviousPage: incoming.pageInfo.hasPreviousPage,
      },
    };
  }
  if (args?.after) {
    return {
      ...existing,
      nodes: [...existing.nodes, ...incoming.nodes],
      pageInfo: {
        ...existing.pageInfo,
        endCursor: incoming.pageInfo.endCursor ?? existing.pageInfo.endCursor,
        hasNextPage: incoming.pageInfo.hasNextPage,
      },
    };
  }
  return incoming; // a first page: start again
}

function cache() {
  return new InMemoryCache({
    possibleTypes,
    typePolicies: {
      Query: {
        fields: {
          // One list per run and kinds filter, whatever the page's limit and cursors.
          runLog: { keyArgs: ["runId", "kinds"], merge: mergeRunLog },
        },
      },
      // A line's `id` is its key (RunLogLine:<id>), Apollo's default.
    },
  });
}

const link = () => new HttpLink({ uri: url });

// A default cache, as a new user would start: how many warnings one read costs.
const plain = new ApolloClient({ cache: new InMemoryCache(), link: link() });
await plain.query({ query: RunLog, variables: { runId, limit: 5 } });
const withoutPossibleTypes = warnings.length;
warnings.length = 0;

const client = new ApolloClient({ cache: cache(), link: link() });
const watched = client.watchQuery({ query: RunLog, variables: { runId, limit: 2 } });
const first = await watched.refetch();
const firstIds = first.data.runLog.nodes.map((line) => line.id);
const { endCursor, startCursor } = first.data.runLog.pageInfo;
await watched.fetchMore({ variables: { after: endCursor } });
const afterOlder = watched.getCurrentResult().data.runLog.nodes.map((line) => line.id);

const written = await client.mutate({
  mutation: WriteNote,
  variables: { runId, text: "written from Apollo", actor: "apollo" },
});
await watched.fetchMore({ variables: { before: startCursor } });
const now = watched.getCurrentResult().data.runLog;

report({
  withoutPossibleTypes,
  warnings,
  firstIds,
  afterOlder,
  written: written.data.writeRunLog,
  afterNewer: now.nodes.map((line) => line.id),
  newest: now.nodes[0].detail,
  newestTypename: now.nodes[0].detail?.__typename,
  startCursorIsNewest: now.pageInfo.startCursor === now.nodes[0].cursor,
});
