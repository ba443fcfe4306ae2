// How the frontend uses the generated documents; `npm run check` type-checks
// this file against src/generated/graphql.ts, so a change to schema.graphql or
// to gql/operations that breaks this usage fails the check.
import { print } from "graphql";
import type { TypedDocumentNode } from "@graphql-typed-document-node/core";
import { createClient, type Client } from "graphql-ws";

import {
  RunLogByKindsDocument,
  RunLogDocument,
  RunLogPageDocument,
  RunLogTailDocument,
  RunLogWaitDocument,
  WriteNoteDocument,
  type RunLogKind,
  type RunLogQuery,
  type RunLogLineFieldsFragment,
} from "./generated/graphql";

type Line = RunLogLineFieldsFragment;

/** POST one operation to /graphql; the result and variables are typed by the document. */
export async function request<TResult, TVariables extends Record<string, unknown>>(
  url: string,
  document: TypedDocumentNode<TResult, TVariables>,
  variables: TVariables,
  token?: string,
): Promise<TResult> {
  const response = await fetch(url, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      ...(token === undefined ? {} : { Authorization: `Bearer ${token}` }),
    },
    body: JSON.stringify({ query: print(document), variables }),
  });
  const body = (await response.json()) as { data?: TResult; errors?: { message: string }[] };
  if (body.errors?.length || body.data === undefined) {
    throw new Error(body.errors?.map((e) => e.message).join("; ") ?? `HTTP ${response.status}`);
  }
  return body.data;
}

/** One line in words, matched on its detail's __typename. */
export function describe(line: Line): string {
  const detail = line.detail;
  if (detail === null) {
    return line.kindName;
  }
  switch (detail.__typename) {
    case "RunCreatedDetail":
      return `created from event ${detail.eventId}, version ${detail.eventVersion ?? "?"}`;
    case "RunStatusDetail":
      return `status ${detail.from ?? "(none)"} → ${detail.to}`;
    case "PhaseEnteredDetail":
      return `phase ${line.phase ?? "?"} entered with steps ${detail.stepIds.join(", ")}`;
    case "StepStatusDetail":
      return `step ${line.stepId ?? "?"} ${detail.from ?? "(none)"} → ${detail.to}`;
    case "NoteDetail":
      return `${detail.actor ?? "someone"}: ${detail.text}`;
    case "RunBlockedDetail": {
      const holder = detail.blockingRun;
      const now = holder === null ? "gone" : holder.terminal ? "now ended" : `still ${holder.status}`;
      return `did not start: run ${detail.blockingRunId} holds ${detail.concurrencyKey} (${now})`;
    }
    case "RunHealthDetail":
      return `health ${detail.from ?? "(none)"} → ${detail.to}`;
    case "StepRetryDetail":
      return `attempt ${detail.attempt} of ${detail.maxAttempts ?? "?"} failed: ${detail.error}`;
    case "StepParkedDetail":
      return `waiting for ${detail.waitingFor}`;
    case "PhaseCompletedDetail":
      return detail.byStatus.map((s) => `${s.count} ${s.status}`).join(", ");
    case "PhaseGateDetail":
      return `gate waits for ${detail.condition} until ${detail.deadline ?? "forced"}`;
    case "ConditionEvaluatedDetail":
      return detail.matched
        ? `${detail.firing ?? detail.condition} matched`
        : `${detail.firing ?? "a firing"} did not match: ${detail.mismatch ?? "(no reason given)"}`;
    case "PhaseAdvancedDetail":
      return advancedBy(detail.via, detail.firing, detail.actor);
    case "RunBudgetDetail":
      return detail.caps.map((c) => `${c.cap} ≤ ${c.limit} (${c.switch ?? "default"})`).join(", ");
    case "StepRefusedDetail":
      return detail.refusal === "OVER_CAP"
        ? `refused: ${detail.cap ?? "a cap"} used ${detail.used ?? "?"} of ${detail.limit ?? "?"}`
        : `refused: ${detail.switch ?? "a switch"} is off`;
    case "VersionVerifiedDetail":
      return `version ${detail.version} verified`;
    case "ResourceRecordedDetail":
      return `${detail.ownership === "CREATED" ? "created" : "borrowed"} ${detail.resourceType} ${detail.externalId}`;
    case "ResourceOrphanedDetail":
      return `${detail.resourceType} ${detail.externalId} no longer in force`;
    case "CleanupRevertedDetail":
      return `${detail.group} came back (${detail.resourceIds.length})`;
    case "CleanupFailedDetail":
      return `${detail.group} did not come back (attempt ${detail.attempt}): ${detail.error}; left ${detail.leftAs}`;
    case "CleanupSweptDetail":
      return `swept ${detail.checked}: ${detail.reverted} back, ${detail.failed} failed, ${detail.remaining} left`;
    case "CleanupRetryDetail":
      return `${detail.actor ?? "someone"} retried ${detail.group}`;
    case "UnreadableDetail":
      return `unreadable detail (${detail.problem}): ${detail.text}`;
    default: {
      // Every type the schema has is handled above, so a detail type added to
      // schema.graphql fails `npm run check` here until it is. A server newer
      // than this build may still send one at run time: show its name.
      const unknown: never = detail;
      return `${line.kindName}: ${(unknown as { __typename: string }).__typename}`;
    }
  }
}

function advancedBy(via: "FIRING" | "DEADLINE" | "FORCED", firing: string | null, actor: string | null): string {
  switch (via) {
    case "FIRING":
      return `gate opened by ${firing ?? "a firing"}`;
    case "DEADLINE":
      return "gate opened on its deadline";
    case "FORCED":
      return `gate forced open by ${actor ?? "someone"}`;
  }
}

/** Every line of a run, newest first, one page at a time. */
export async function* wholeLog(url: string, runId: string): AsyncGenerator<Line> {
  let after: string | null = null;
  for (;;) {
    const page: RunLogQuery["runLog"] = (await request(url, RunLogDocument, { runId, limit: 500, after }))
      .runLog;
    yield* page.nodes;
    if (!page.pageInfo.hasNextPage) {
      return;
    }
    after = page.pageInfo.endCursor;
  }
}

/** The lines written since `page` was read: the same RunLog, its startCursor as `before`. */
export async function newerThan(url: string, runId: string, page: RunLogQuery["runLog"]): Promise<Line[]> {
  const newer: Line[] = [];
  let before = page.pageInfo.startCursor;
  for (;;) {
    const next: RunLogQuery["runLog"] = (await request(url, RunLogDocument, { runId, before })).runLog;
    newer.unshift(...next.nodes); // each page is newest first, and newer than the last
    before = next.pageInfo.startCursor ?? before;
    if (!next.pageInfo.hasPreviousPage) {
      return newer;
    }
  }
}

/** "Why didn't phase 2 start?": the gate's lines alone. */
export async function gateStory(url: string, runId: string): Promise<string[]> {
  const kinds: RunLogKind[] = ["PHASE_GATE", "CONDITION_EVALUATED", "PHASE_ADVANCED"];
  const { runLog } = await request(url, RunLogByKindsDocument, { runId, kinds });
  return runLog.nodes.map(describe);
}

/** Line ids of one page, for a quick scroll. */
export async function pageIds(url: string, runId: string, after: string | null): Promise<string[]> {
  const { runLog } = await request(url, RunLogPageDocument, { runId, limit: 20, after });
  return runLog.nodes.map((line) => `${line.id} ${line.kind ?? line.kindName} at ${line.at}`);
}

/** Write a note; false means the server did not store it (and logged why). */
export async function writeNote(url: string, runId: string, text: string, token: string): Promise<boolean> {
  const { writeRunLog } = await request(url, WriteNoteDocument, { runId, text }, token);
  return writeRunLog;
}

/** The websocket client for runLogTail: the same /graphql, `ws:` or `wss:`; the token in connection_init. */
export function tailClient(url: string, token?: string): Client {
  return createClient({
    url: url.replace(/^http/, "ws"),
    // A browser cannot set a websocket's headers: the token goes here.
    connectionParams: token === undefined ? {} : { Authorization: `Bearer ${token}` },
    // The server closes with 1012 when it restarts; the client reconnects by itself.
    retryAttempts: Infinity,
  });
}

/**
 * Follow a run live: `onLine` gets each line once, oldest first, as it is
 * written. The last cursor seen is kept and passed as `since` whenever the
 * subscription starts again (after the socket dropped, or the server
 * restarted), so nothing is missed and nothing comes twice. Call the returned
 * function to stop.
 */
export function followRun(client: Client, runId: string, onLine: (line: Line) => void): () => void {
  let since: string | null = null;
  let stopped = false;
  let stop = (): void => {};
  const start = (): void => {
    stop = client.subscribe(
      { query: print(RunLogTailDocument), variables: { runId, since } },
      {
        next: (result) => {
          const line = (result.data as { runLogTail?: Line & { cursor: string } } | null | undefined)?.runLogTail;
          if (line) {
            since = line.cursor;
            onLine(line);
          }
        },
        // A refusal (a token that may not read, a cap) ends it: retrying would be refused again.
        error: (error) => console.error("runLogTail ended:", error),
        // Completed by the server (it is shutting down): start again from the last cursor.
        complete: () => {
          if (!stopped) {
            start();
          }
        },
      },
    );
  };
  start();
  return () => {
    stopped = true;
    stop();
  };
}

/**
 * The long poll, for where a websocket cannot go: wait up to 25 s for lines
 * newer than `before` (a page's `pageInfo.startCursor`), then ask again from
 * the answer's `startCursor`.
 */
export async function pollForLines(url: string, runId: string, before: string): Promise<[Line[], string]> {
  const { runLog } = await request(url, RunLogWaitDocument, { runId, before, wait: 25 });
  // Newest first on the page; oldest first for the reader.
  return [[...runLog.nodes].reverse(), runLog.pageInfo.startCursor ?? before];
}
