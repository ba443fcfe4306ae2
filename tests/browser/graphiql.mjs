// Opens GraphiQL at BASE_URL/graphql in Debian's Chromium (never a downloaded
// browser) with every request to another host refused, runs the first example
// tab (RunLog), saves a screenshot, and prints what it saw as one JSON object
// for tests/test_graphiql_browser.py to judge (with `error` set, and exit
// status 1, when the page never got as far as a result).
//
//   node tests/browser/graphiql.mjs BASE_URL SCREENSHOT_PATH
//
// CHROMIUM names the browser (default /usr/bin/chromium).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const [baseURL, screenshotPath] = process.argv.slice(2);
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

  page = context.pages()[0] ?? (await context.newPage());
  page.on("request", (request) => {
    if (offHost(request.url())) seen.offHost.push(request.url());
    else seen.requests.push(new URL(request.url()).pathname);
  });
  page.on("console", (message) => {
    if (message.type() === "error") seen.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => seen.pageErrors.push(String(error)));
  // What the page's Content-Security-Policy refused, as the page itself sees it.
  await page.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
    });
  });

  const response = await page.goto(`${baseURL}/graphql`, { waitUntil: "load" });
  const headers = response.headers();

  // The example tabs, as GraphiQL shows them.
  await page.locator(".graphiql-tab").first().waitFor({ timeout: 30000 });
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
} catch (error) {
  // Still a report and a screenshot: they show what the page got stuck on.
  report.error = String(error);
} finally {
  if (page !== null) {
    fs.mkdirSync(path.dirname(screenshotPath), { recursive: true });
    await page.screenshot({ path: screenshotPath }).catch(() => {});
  }
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
seen.offHost = [...new Set(seen.offHost)];
process.stdout.write(JSON.stringify({ ...report, ...seen }) + "\n");
process.exitCode = report.error === null ? 0 : 1;
