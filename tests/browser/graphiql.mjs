// Opens GraphiQL at BASE_URL/graphql in Debian's Chromium (never a downloaded
// browser) with every request to another host refused, runs the first example
// tab (RunLog), saves a screenshot, and prints what it saw as one JSON object
// for tests/test_graphiql_browser.py to judge (with `error` set, and exit
// status 1, when the page never got as far as a result).
//
//   node tests/browser/graphiql.mjs BASE_URL SCREENSHOT_PATH [--tail=SUBSCRIPTION]
//
// With --tail it then does what a person would to watch a run live: starts
// the runLogTail subscription in one browser tab of GraphiQL, writes a note
// with the WriteNote example in another, and waits for the note to arrive in
// the first (GraphiQL runs one operation at a time per page: running another
// in the same page stops the subscription).
//
// CHROMIUM names the browser (default /usr/bin/chromium).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const [baseURL, screenshotPath, ...options] = process.argv.slice(2);
// --tail=QUERY: the subscription to start, on the run named in it.
const tailQuery = options.find((option) => option.startsWith("--tail="))?.slice("--tail=".length);
const tail = tailQuery !== undefined;
if (!baseURL || !screenshotPath) {
  console.error("usage: node graphiql.mjs BASE_URL SCREENSHOT_PATH");
  process.exit(2);
}
const ownHost = new URL(baseURL).host;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "runlog-chromium-"));

const seen = {
  offHost: [], // every request the page tried to make to another host
  requests: [], // every request it made, same host
  websockets: [],
  consoleErrors: [],
  pageErrors: [],
};

function offHost(url) {
  const parsed = new URL(url);
  // data: and blob: URLs never leave the browser.
  if (parsed.protocol === "data:" || parsed.protocol === "blob:") return false;
  return parsed.host !== ownHost;
}

function editorValue(page, selector) {
  return page.locator(selector).first().evaluate((element) => element.CodeMirror.getValue());
}

function setEditorValue(page, selector, value) {
  return page
    .locator(selector)
    .first()
    .evaluate((element, text) => element.CodeMirror.setValue(text), value);
}

const QUERY_EDITOR = ".graphiql-query-editor .CodeMirror";
const VARIABLES_EDITOR = ".graphiql-editor-tool .CodeMirror";
const RESPONSE_EDITOR = ".graphiql-response .CodeMirror";

async function openGraphiQL(page) {
  const response = await page.goto(`${baseURL}/graphql`, { waitUntil: "load" });
  await page.locator(".graphiql-tab").first().waitFor({ timeout: 30000 });
  return response;
}

async function selectTab(page, name) {
  await page.locator(".graphiql-tab-button", { hasText: new RegExp(`^${name}$`) }).click();
  await page.locator(".graphiql-tab-active .graphiql-tab-button", { hasText: new RegExp(`^${name}$`) }).waitFor();
}

// Waits until the server counts `count` runLogTail subscriptions open.
async function subscriptionsOpen(count) {
  for (const started = Date.now(); Date.now() - started < 30000; ) {
    const text = await (await fetch(`${baseURL}/metrics`)).text();
    const open = /^runlog_subscriptions_open(?:\{[^}]*\})? (\S+)$/m.exec(text);
    if (open && Number(open[1]) >= count) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the server never counted ${count} runLogTail subscription(s) open on /metrics`);
}

// The tail: one page runs the subscription, another writes notes to the same
// run with the WriteNote example, once the server counts the subscription.
// The first note arrives; another is written only if the server took its
// starting point (a tail without `since` starts from now) just after it.
async function watchTail(context) {
  const tailPage = await context.newPage();
  await openGraphiQL(tailPage);
  // A tab of its own, with the subscription typed in as a person would paste it.
  await tailPage.locator(".graphiql-tab-add").click();
  await setEditorValue(tailPage, VARIABLES_EDITOR, "");
  const runId = /runId:\s*"?(\d+)/.exec(tailQuery)[1];
  // Pasted and run in the same moment, as a person who pastes and presses
  // Ctrl-Enter at once: before GraphiQL's own parse of the editor (100 ms
  // after a change), which the page's fetcher must not rely on.
  await tailPage
    .locator(QUERY_EDITOR)
    .first()
    .evaluate((element, text) => {
      element.CodeMirror.setValue(text);
      document.querySelector(".graphiql-execute-button").click();
    }, tailQuery);
  // While a subscription runs, GraphiQL's run button becomes its stop button.
  await tailPage.locator(".graphiql-execute-button[aria-label*='Stop']").waitFor({ timeout: 30000 });

  // The server has the subscription once /metrics counts it: a note written
  // before that (a tail without `since` starts from now) would never arrive.
  await subscriptionsOpen(1);

  const notePage = await context.newPage();
  await openGraphiQL(notePage);
  await selectTab(notePage, "WriteNote");
  const written = [];
  let arrived = null;
  for (let attempt = 1; attempt <= 3 && arrived === null; attempt++) {
    const text = `Seen live in GraphiQL, note ${attempt} (${Date.now()})`;
    await setEditorValue(
      notePage,
      VARIABLES_EDITOR,
      JSON.stringify({ runId, text, actor: "the browser test" }, null, 2),
    );
    await setEditorValue(notePage, RESPONSE_EDITOR, "");
    await notePage.locator(".graphiql-execute-button").click();
    await notePage.waitForFunction(
      (selector) => document.querySelector(selector)?.CodeMirror?.getValue().includes("writeRunLog"),
      RESPONSE_EDITOR,
      { timeout: 30000 },
    );
    written.push({ text, answer: JSON.parse(await editorValue(notePage, RESPONSE_EDITOR)) });
    try {
      await tailPage.waitForFunction(
        ([selector, expected]) => document.querySelector(selector)?.CodeMirror?.getValue().includes(expected),
        [RESPONSE_EDITOR, text],
        { timeout: 20000 },
      );
      arrived = JSON.parse(await editorValue(tailPage, RESPONSE_EDITOR));
    } catch {
      // Not (yet) there: write another.
    }
  }
  const shot = screenshotPath.replace(/\.png$/, "-tail.png");
  await tailPage.screenshot({ path: shot });
  return {
    runId,
    written,
    arrived,
    running: (await tailPage.locator(".graphiql-execute-button[aria-label*='Stop']").count()) === 1,
    screenshot: shot,
    cspViolations: [
      ...(await tailPage.evaluate(() => window.__cspViolations)),
      ...(await notePage.evaluate(() => window.__cspViolations)),
    ],
  };
}

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

const report = { error: null };
let page = null;
try {
  // Every request to another host is refused before it leaves, and noted.
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (offHost(url)) {
      seen.offHost.push(url);
      return route.abort("blockedbyclient");
    }
    return route.continue();
  });
  await context.routeWebSocket(/.*/, (ws) => {
    if (offHost(ws.url())) {
      seen.offHost.push(ws.url());
      return ws.close();
    }
    seen.websockets.push(ws.url());
    ws.connectToServer();
  });

  // Every page of the context is watched the same way (the tail opens a second).
  context.on("request", (request) => {
    if (offHost(request.url())) seen.offHost.push(request.url());
    else seen.requests.push(new URL(request.url()).pathname);
  });
  context.on("console", (message) => {
    if (message.type() === "error") seen.consoleErrors.push(message.text());
  });
  context.on("weberror", (error) => seen.pageErrors.push(String(error.error())));
  // What the page's Content-Security-Policy refused, as the page itself sees it.
  await context.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
    });
  });
  page = context.pages()[0] ?? (await context.newPage());

  const response = await openGraphiQL(page);
  const headers = response.headers();

  // The example tabs, as GraphiQL shows them.
  const tabs = await page.locator(".graphiql-tab .graphiql-tab-button").allInnerTexts();

  // Run the tab GraphiQL opened on (RunLog) and wait for its result.
  await page.locator(".graphiql-execute-button").click();
  const responseEditor = page.locator(".graphiql-response .CodeMirror");
  await page.waitForFunction(
    () => {
      const editor = document.querySelector(".graphiql-response .CodeMirror");
      return editor && editor.CodeMirror && editor.CodeMirror.getValue().trim().startsWith("{");
    },
    null,
    { timeout: 30000 },
  );
  const resultText = await responseEditor.evaluate((element) => element.CodeMirror.getValue());
  const variablesText = await page
    .locator(".graphiql-editor-tool .CodeMirror")
    .first()
    .evaluate((element) => element.CodeMirror.getValue());

  Object.assign(report, {
    status: response.status(),
    contentSecurityPolicy: headers["content-security-policy"] ?? null,
    title: await page.title(),
    tabs,
    activeTab: await page.locator(".graphiql-tab-active .graphiql-tab-button").innerText(),
    variables: variablesText,
    result: JSON.parse(resultText),
    subscriptionUrl: await page.evaluate(() => window.RUNLOG_GRAPHIQL?.subscriptionUrl ?? null),
    cspViolations: await page.evaluate(() => window.__cspViolations),
  });
  fs.mkdirSync(path.dirname(screenshotPath), { recursive: true });
  await page.screenshot({ path: screenshotPath });
  // The explorer plugin and the docs, which build on the schema's introspection.
  await page.locator("button[aria-label='Show GraphiQL Explorer']").click();
  await page.locator(".graphiql-plugin").getByText("runLog", { exact: true }).first().waitFor({ timeout: 30000 });
  report.explorer = await page.locator(".graphiql-plugin").innerText();
  await page.locator("button[aria-label='Show Documentation Explorer']").click();
  await page.locator(".graphiql-plugin").getByText("RunLogPage", { exact: true }).first().waitFor({ timeout: 30000 });
  report.docs = await page.locator(".graphiql-plugin").innerText();
  report.cspViolations = await page.evaluate(() => window.__cspViolations);

  // The tabs this browser stored, as a second page (or a reload) opens them.
  const again = await context.newPage();
  await openGraphiQL(again);
  report.tabsWhenReopened = await again.locator(".graphiql-tab .graphiql-tab-button").allInnerTexts();
  await again.close();
  // A shared link opens its query in a tab of its own.
  const shared = await context.newPage();
  await shared.goto(`${baseURL}/graphql?q=${encodeURIComponent("query Shared { __typename }")}`);
  await shared.locator(".graphiql-tab").first().waitFor({ timeout: 30000 });
  report.sharedLink = {
    activeTab: await shared.locator(".graphiql-tab-active .graphiql-tab-button").innerText(),
    query: await editorValue(shared, QUERY_EDITOR),
  };
  await shared.close();

  // What GraphiQL hands its fetcher when a text is run before its own parse
  // of the editor (100 ms after a change) caught up: the document and the
  // operation name of the text before, here a shared link's. The page's
  // fetcher sends what the text says, whatever the machine's speed.
  report.staleParse = await page.evaluate(async (runId) => {
    const { fetcher } = window.RUNLOG_GRAPHIQL;
    const before = { documentAST: GraphiQL.GraphQL.parse("query Shared { __typename }"), operationName: "Shared" };
    // The first result, whether the fetcher answers once or as a stream.
    async function first(sent) {
      const answer = await sent;
      if (typeof answer?.[Symbol.asyncIterator] !== "function") return answer;
      const iterator = answer[Symbol.asyncIterator]();
      const { value } = await iterator.next();
      await iterator.return?.();
      return value;
    }
    const query = await first(
      fetcher({ query: `query Other { runLog(runId: ${runId}, limit: 2) { nodes { id cursor } } }`, operationName: "Shared" }, before),
    );
    // From the older of the run's two newest lines, the tail's catch-up
    // delivers the newest at once: over the websocket only (HTTP refuses a
    // subscription).
    const [newest, older] = query.data?.runLog.nodes ?? [];
    const subscription = await first(
      fetcher(
        {
          query: `subscription Other($since: String) { runLogTail(runId: ${runId}, since: $since) { id } }`,
          variables: { since: older?.cursor },
          operationName: "Shared",
        },
        before,
      ),
    );
    return { query, newest: newest?.id ?? null, subscription };
  }, /runId:\s*"?(\d+)/.exec(tailQuery ?? 'runId: 1')[1]);

  if (tail) report.tail = await watchTail(context);
} catch (error) {
  // Still a report and a screenshot: they show what the page got stuck on.
  report.error = String(error);
} finally {
  if (page !== null && report.error !== null) {
    fs.mkdirSync(path.dirname(screenshotPath), { recursive: true });
    await page.screenshot({ path: screenshotPath }).catch(() => {});
  }
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
seen.offHost = [...new Set(seen.offHost)];
process.stdout.write(JSON.stringify({ ...report, ...seen }) + "\n");
process.exitCode = report.error === null ? 0 : 1;
