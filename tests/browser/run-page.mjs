// The run page in a real browser: tests/test_run_page_browser.py runs this
// against `python -m gql serve --demo` started with a reader and a writer
// token and RUNLOG_TRUSTED_DOCUMENTS=on, and reads the JSON report it prints.
//
//   node run-page.mjs BASE_URL ARTIFACTS_DIR
//
// RUNLOG_TEST_READER_TOKEN, RUNLOG_TEST_WRITER_TOKEN and RUNLOG_TEST_ADMIN_TOKEN
// are the server's tokens; RUNLOG_TEST_LONG_RUN is `runId:lineId`, a long run
// and its oldest line, and RUNLOG_TEST_KINDS_RUN a run with a line of every
// kind. Every step waits for what it checks, never for a duration; a step
// that fails leaves the report's `error` and a screenshot of where it stood.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [baseURL, artifacts] = process.argv.slice(2);
if (!baseURL || !artifacts) {
  console.error("usage: node run-page.mjs BASE_URL ARTIFACTS_DIR");
  process.exit(2);
}
const readerToken = process.env.RUNLOG_TEST_READER_TOKEN;
const writerToken = process.env.RUNLOG_TEST_WRITER_TOKEN;
const adminToken = process.env.RUNLOG_TEST_ADMIN_TOKEN;
const [longRun, oldestLine] = (process.env.RUNLOG_TEST_LONG_RUN ?? ":").split(":");
const kindsRun = process.env.RUNLOG_TEST_KINDS_RUN;
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const axeSource = fs.readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const shipped = JSON.parse(fs.readFileSync(path.join(here, "../../gql/operations/persisted-documents.json"), "utf8"));
const WRITE_NOTE = Object.keys(shipped).find((key) => shipped[key].includes("mutation WriteNote"));
// Each shipped document's operation name, by its id: what the page sent.
const OPERATION_OF = Object.fromEntries(
  Object.entries(shipped).map(([key, text]) => [key, /\b(?:query|mutation|subscription) (\w+)/.exec(text)[1]]),
);
const ownHost = new URL(baseURL).host;
const TIMEOUT = { timeout: 30000 };
fs.mkdirSync(artifacts, { recursive: true });

const seen = { offHost: [], consoleErrors: [], pageErrors: [], sockets: 0, heldOff: 0, sent: [], headsAtOnce: 0, headsAbandoned: 0 };
// Head calls in flight, per page: a call a reloaded page left behind is not its successor's.
const headsInFlight = new Map();
// When set, the next head call's answer is held back, once the service gave
// it, until `gate` resolves; `fetched()` says it has been given.
let holdNextHead = null;
const report = { error: null, step: null, failed: {} };

function offHost(url) {
  const parsed = new URL(url);
  if (parsed.protocol === "data:" || parsed.protocol === "blob:") return false;
  return parsed.host !== ownHost;
}

// A note written as any client writes one: the shipped WriteNote, by its id.
async function writeNote(runId, text) {
  const response = await fetch(`${baseURL}/graphql`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${writerToken}` },
    body: JSON.stringify({ documentId: WRITE_NOTE, variables: { runId, text, actor: "the browser test" } }),
  });
  const answer = await response.json();
  if (answer?.data?.writeRunLog !== true) throw new Error(`WriteNote: ${JSON.stringify(answer)}`);
}

// Any line, as the event runner writes it: by the admin, whose documents need not be shipped ones.
async function writeLine(runId, kind, detail, stepId, phase) {
  const response = await fetch(`${baseURL}/graphql`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${adminToken}` },
    body: JSON.stringify({
      query: "mutation W($runId: ID!, $kind: String!, $detail: JSON, $stepId: ID, $phase: Int) " +
        "{ writeRunLog(runId: $runId, kind: $kind, detail: $detail, stepId: $stepId, phase: $phase) }",
      variables: { runId, kind, detail, stepId, phase },
    }),
  });
  const answer = await response.json();
  if (answer?.data?.writeRunLog !== true) throw new Error(`writeRunLog: ${JSON.stringify(answer)}`);
}

// Whether the row of line `id` is drawn, marked, and inside both the table's
// scrolled view and the window, as the page stands.
function lineShown(page, id) {
  return page.evaluate((id) => {
    const row = document.querySelector(`[data-line="${CSS.escape(id)}"]`);
    if (row === null) return { drawn: false, shown: "no row", top: document.querySelector(".scroll")?.scrollTop };
    const box = row.getBoundingClientRect();
    const table = row.closest(".scroll").getBoundingClientRect();
    return {
      drawn: true,
      marked: row.classList.contains("highlight") && row.getAttribute("aria-current") === "true",
      inWindow: box.top >= 0 && box.bottom <= window.innerHeight,
      inTable: box.top >= table.top && box.bottom <= table.bottom,
    };
  }, id);
}

// Runs one check; a failure is kept in report.failed[name] instead of ending the session.
async function part(name, check) {
  try {
    await check();
  } catch (error) {
    report.failed[name] = String(error);
  }
}

// axe-core's violations of impact serious or critical, on the page as it is.
async function accessibility(page) {
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ["violations"] });
    return result.violations
      .filter((violation) => violation.impact === "serious" || violation.impact === "critical")
      .map((violation) => ({
        id: violation.id,
        impact: violation.impact,
        help: violation.help,
        nodes: violation.nodes.slice(0, 3).map((node) => node.target.join(" ")),
      }));
  });
}

function rowWith(page, text) {
  return page.locator("[data-line]", { hasText: text });
}

async function loadedCount(page) {
  return Number(/(\d+) lines loaded/.exec(await page.locator(".loaded").innerText())[1]);
}

const context = await chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), "runlog-chromium-")), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
let page = null;
// Websockets go through here, so the test can cut them and hold the page's
// reconnects off until it has written a line the page has not seen.
const sockets = [];
let holdOff = false;
let sawHeldOff;
const heldOffOnce = new Promise((resolve) => {
  sawHeldOff = resolve;
});
try {
  await context.route("**/*", async (route) => {
    const request = route.request();
    if (offHost(request.url())) {
      seen.offHost.push(request.url());
      return route.abort("blockedbyclient");
    }
    if (request.method() === "POST" && new URL(request.url()).pathname === "/graphql") {
      const body = JSON.parse(request.postData() ?? "{}");
      seen.sent.push({ documentId: body.documentId ?? null, query: body.query ?? null,
        operation: OPERATION_OF[body.documentId] ?? null, authorization: request.headers().authorization ?? null });
      if (OPERATION_OF[body.documentId] === "RunHead") {
        // How many of the page's head calls were ever in flight together.
        const asker = request.frame().page();
        headsInFlight.set(asker, (headsInFlight.get(asker) ?? 0) + 1);
        seen.headsAtOnce = Math.max(seen.headsAtOnce, headsInFlight.get(asker));
        try {
          const response = await route.fetch();
          const hold = holdNextHead;
          holdNextHead = null;
          if (hold) {
            hold.fetched();
            await hold.gate;
          }
          return await route.fulfill({ response });
        } catch (error) {
          // The page went on (a navigation, a reload) while the call was out: no one waits for its answer.
          if (!/context disposed|Target .*closed/i.test(String(error))) throw error;
          seen.headsAbandoned += 1;
        } finally {
          headsInFlight.set(asker, headsInFlight.get(asker) - 1);
        }
      }
    }
    return route.continue();
  });
  await context.routeWebSocket(/.*/, (ws) => {
    if (offHost(ws.url())) {
      seen.offHost.push(ws.url());
      return ws.close();
    }
    if (holdOff) {
      seen.heldOff += 1;
      sawHeldOff();
      return ws.close({ code: 1013, reason: "held off by the test" });
    }
    seen.sockets += 1;
    ws.connectToServer();
    sockets.push(ws);
  });
  context.on("console", (message) => {
    if (message.type() === "error") seen.consoleErrors.push(message.text());
  });
  context.on("weberror", (error) => seen.pageErrors.push(String(error.error())));
  await context.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
    });
  });
  page = context.pages()[0] ?? (await context.newPage());

  report.step = "the runs page, without a token";
  await page.goto(`${baseURL}/runs`);
  await page.locator("[role=alert]", { hasText: "was refused" }).first().waitFor(TIMEOUT);
  report.refused = await page.locator("[role=alert]").innerText();

  report.step = "give the reader's token";
  await page.locator("#token").fill(readerToken);
  await page.getByRole("button", { name: "Use token" }).click();
  await page.locator("table.runs tbody tr").first().waitFor(TIMEOUT);
  await page.locator("[role=alert]").waitFor({ state: "detached", ...TIMEOUT });
  report.runs = {
    title: await page.title(),
    rows: await page.locator("table.runs tbody tr").allInnerTexts(),
    accessibility: await accessibility(page),
  };
  await page.screenshot({ path: path.join(artifacts, "run-page-runs.png"), fullPage: true });

  report.step = "the runs held so, by the filters in the URL";
  await part("runFilters", async () => {
    // Opened on each filter's URL (a new page load each), then a reason ticked on the page.
    const listed = async (search) => {
      await page.goto(`${baseURL}/runs${search}`);
      await page.locator("table.runs tbody tr").first().waitFor(TIMEOUT);
      return page.locator("table.runs tbody tr").evaluateAll((rows) => rows.map((row) => row.dataset.run));
    };
    report.runFilters = {
      parked: await listed("?reason=STEP_PARKED"),
      parkedChecked: await page.getByLabel("STEP_PARKED").isChecked(),
      held: await page.locator("table.runs tbody tr .held").allInnerTexts(),
      lastLine: await page.locator("table.runs tbody tr .last-line").allInnerTexts(),
      byRun37: await listed("?blockingRunId=37"),
      byKey: await listed("?reason=BLOCKED_BY_RUN&concurrencyKey=invasion%3AYew"),
      keyShown: await page.getByLabel("On the concurrency key").inputValue(),
    };
    await page.goto(`${baseURL}/runs?reason=BLOCKED_BY_RUN`);
    await page.locator("table.runs tbody tr[data-run='38']").waitFor(TIMEOUT);
    await page.getByLabel("STEP_PARKED").check();
    await page.locator("table.runs tbody tr[data-run='37']").waitFor(TIMEOUT);
    report.runFilters.ticked = {
      search: new URL(page.url()).search,
      runs: await page.locator("table.runs tbody tr").evaluateAll((rows) => rows.map((row) => row.dataset.run)),
    };
  });
  await page.goto(`${baseURL}/runs`);
  await page.locator("table.runs tbody tr").first().waitFor(TIMEOUT);

  report.step = "open run 38 by its id";
  await page.locator("#open-run-id").fill("38");
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/runs\/38$/, TIMEOUT);
  await page.locator("[data-line]").first().waitFor(TIMEOUT);

  report.step = "run 38 is blocked by run 37";
  const hold = page.locator(".hold[data-reason=BLOCKED_BY_RUN]");
  const blocked = hold.locator(".blocking a", { hasText: "run 37" });
  await blocked.waitFor(TIMEOUT);
  report.blocked = {
    hold: await hold.innerText(),
    row: await rowWith(page, "blocked by").first().innerText(),
    href: await blocked.getAttribute("href"),
    accessibility: await accessibility(page),
  };
  await page.screenshot({ path: path.join(artifacts, "run-page-38.png"), fullPage: true });

  report.step = "follow the link to run 37";
  await blocked.click();
  await page.waitForURL(/\/runs\/37$/, TIMEOUT);
  await page.locator("[data-line]").first().waitFor(TIMEOUT);
  const parked = page.locator(".hold[data-reason=STEP_PARKED]");
  await parked.waitFor(TIMEOUT);
  await page.locator(".gantt [data-span]").first().waitFor(TIMEOUT);
  report.run37 = {
    title: await page.title(),
    rows: await page.locator("[data-line]").count(),
    headline: await page.locator(".head .headline").innerText(),
    parked: await parked.locator(".sentence").innerText(),
    timeline: await page.locator(".timeline").innerText(),
    holds: await page.locator(".holds").innerText(),
    ...(await page.evaluate(() => ({
      refusedStep: document.querySelector('.timeline [data-step="3704"]')?.innerText ?? null,
      noLineStep: document.querySelector('.timeline [data-step="3706"]')?.innerText ?? null,
      moments: [...document.querySelectorAll('.timeline [data-phase="2"] .moments li')].map((li) => li.innerText),
      spans: [...document.querySelectorAll(".gantt [data-span]")].map((g) => ({
        phase: g.dataset.phase, step: g.dataset.step, state: g.dataset.state, open: g.dataset.open,
      })),
      heldFor: [...document.querySelectorAll(".hold .held-for")].map((element) => element.textContent),
    }))),
    accessibility: await accessibility(page),
  };
  await page.screenshot({ path: path.join(artifacts, "run-page.png"), fullPage: true });

  report.step = "the open spans grow as the clock ticks";
  await part("grows", async () => {
    // Phase 2's bar, entered and not completed: its end is now, so it widens (no line is written).
    const bar = '.gantt [data-span][data-step=""][data-phase="2"] rect';
    const width = () => page.evaluate((selector) => Number(document.querySelector(selector).getAttribute("width")), bar);
    const before = await width();
    await page.waitForFunction(([selector, was]) => Number(document.querySelector(selector).getAttribute("width")) > was,
      [bar, before], TIMEOUT);
    report.grows = { before, after: await width() };
  });

  report.step = "a hold's evidence opens the table on its line";
  const evidence = parked.locator(".evidence a").first();
  const evidenceHref = await evidence.getAttribute("href");
  await evidence.click();
  await page.waitForURL(/\?line=/, TIMEOUT);
  await page.locator(".row.highlight").waitFor(TIMEOUT);
  report.evidence = {
    href: evidenceHref,
    highlighted: await page.locator(".row.highlight").innerText(),
    search: new URL(page.url()).search,
  };

  report.step = "filter by a step (its button in the timeline)";
  await page.locator(".timeline button", { hasText: "step 3704" }).click();
  await page.waitForFunction(() => {
    const steps = [...document.querySelectorAll("[data-line] .step")].map((element) => element.textContent);
    return steps.length > 0 && steps.every((step) => step === "3704");
  }, null, TIMEOUT);
  report.stepFilter = {
    search: new URL(page.url()).search,
    rows: await page.locator("[data-line]").allInnerTexts(),
    pressed: await page.locator(".timeline button", { hasText: "step 3704" }).getAttribute("aria-pressed"),
  };
  await page.locator(".timeline button", { hasText: "step 3704" }).click();
  await page.waitForFunction(() => !new URL(window.location.href).searchParams.has("step"), null, TIMEOUT);

  report.step = "filter by a kind";
  await page.getByLabel("step.refused", { exact: false }).check();
  await page.waitForFunction(() => {
    const kinds = [...document.querySelectorAll("[data-line] .kind")].map((element) => element.textContent);
    return kinds.length > 0 && kinds.every((kind) => kind.includes("step.refused"));
  }, null, TIMEOUT);
  report.kindFilter = {
    search: new URL(page.url()).search,
    rows: await page.locator("[data-line]").count(),
  };
  // The filter is in the URL: the page opened again shows the same lines.
  await page.reload();
  await page.locator("[data-line]").first().waitFor(TIMEOUT);
  report.kindFilter.checkedAfterReload = await page.getByLabel("step.refused", { exact: false }).isChecked();
  report.kindFilter.rowsAfterReload = await page.locator("[data-line]").count();
  await page.getByLabel("step.refused", { exact: false }).uncheck();
  await page.waitForFunction(() => !new URL(window.location.href).searchParams.has("kind"), null, TIMEOUT);
  await page.locator("[data-line]", { hasNotText: "step.refused" }).first().waitFor(TIMEOUT);

  report.step = "a line written arrives live";
  await page.locator(".tail-state[data-state=live]").waitFor(TIMEOUT);
  const stamp = Date.now();
  const [first, during, after] = ["written live", "written while the socket was down", "written after"].map(
    (text) => `${text} (${stamp})`,
  );
  const before = await loadedCount(page);
  await writeNote("37", first);
  await rowWith(page, first).waitFor(TIMEOUT);
  report.live = { arrived: await rowWith(page, first).innerText() };

  report.step = "cut the socket";
  holdOff = true;
  for (const ws of sockets.splice(0)) await ws.close({ code: 1012, reason: "cut by the test" });
  await page.locator(".tail-state[data-state=dropped]").waitFor(TIMEOUT);
  report.dropped = await page.locator(".tail-state").innerText();
  await writeNote("37", during);
  // The page tried again, and was held off: it cannot have seen the line yet.
  await heldOffOnce;
  const heldOff = seen.heldOff;
  holdOff = false;
  await page.locator(".tail-state[data-state=live]").waitFor(TIMEOUT);
  report.resumed = await page.locator(".tail-state").innerText();
  await rowWith(page, during).waitFor(TIMEOUT);
  await writeNote("37", after);
  await rowWith(page, after).waitFor(TIMEOUT);
  report.afterDrop = {
    heldOff,
    counts: await Promise.all([first, during, after].map((text) => rowWith(page, text).count())),
    added: (await loadedCount(page)) - before,
    order: await page.locator("[data-line]", { hasText: String(stamp) }).allInnerTexts(),
  };
  await page.screenshot({ path: path.join(artifacts, "run-page-resumed.png"), fullPage: true });

  // Each check below says what it saw in its own part of the report, and a
  // check that fails there leaves the steps after it to run.
  report.step = "a line that releases step 3705 updates the head, live";
  await part("release", async () => {
    const parkedHold = page.locator(".hold[data-reason=STEP_PARKED]");
    const step3705 = page.locator(".timeline button", { hasText: "step 3705" });
    const statusCount = page.locator(".kind-choice", { hasText: "step.status" }).locator(".count");
    await parkedHold.waitFor(TIMEOUT);
    await statusCount.waitFor(TIMEOUT);
    const sentBefore = seen.sent.length;
    report.release = {
      before: {
        headline: await page.locator(".head .headline").innerText(),
        parked: await parkedHold.locator(".sentence").innerText(),
        step: await step3705.innerText(),
        statusCount: Number(await statusCount.innerText()),
      },
    };
    await writeLine("37", "step.status", { from: "parked", to: "running", module: "rewards" }, "3705", 2);
    await parkedHold.waitFor({ state: "detached", ...TIMEOUT });
    await page.locator(".timeline button", { hasText: "step 3705: running" }).waitFor(TIMEOUT);
    await page.locator(".kind-choice", { hasText: "step.status" })
      .locator(".count", { hasText: String(report.release.before.statusCount + 1) }).waitFor(TIMEOUT);
    report.release.after = {
      headline: await page.locator(".head .headline").innerText(),
      holds: await page.locator(".hold").evaluateAll((holds) => holds.map((hold) => hold.dataset.reason)),
      step: await step3705.innerText(),
      statusCount: Number(await statusCount.innerText()),
      row: await rowWith(page, "parked → running").first().innerText(),
      sent: seen.sent.slice(sentBefore).map((call) => call.operation),
    };
    // Lines written together: the head calls stay one at a time, and the
    // last of them still counts every line.
    const noteCount = page.locator(".kind-choice", { hasText: /^\s*note/ }).locator(".count");
    const notesBefore = Number(await noteCount.innerText());
    seen.headsAtOnce = 0; // counted from here: the lines written together
    const together = [1, 2, 3, 4, 5].map((n) => `written together ${n} (${Date.now()})`);
    await Promise.all(together.map((text) => writeNote("37", text)));
    for (const text of together) await rowWith(page, text).waitFor(TIMEOUT);
    await page.locator(".kind-choice", { hasText: /^\s*note/ })
      .locator(".count", { hasText: new RegExp(`^${notesBefore + together.length}$`) }).waitFor(TIMEOUT);
    report.release.together = { notesBefore, notesAfter: Number(await noteCount.innerText()), headsAtOnce: seen.headsAtOnce };
    // A line that arrives while a head call is in flight: that call's answer,
    // given before the line was written, is stale, and one more call follows it.
    let open;
    let fetched;
    const gate = new Promise((resolve) => {
      open = resolve;
    });
    const given = new Promise((resolve) => {
      fetched = resolve;
    });
    holdNextHead = { gate, fetched };
    const [early, late] = ["before the head answered", "while the head was asked"].map((text) => `${text} (${Date.now()})`);
    await writeNote("37", early);
    await given;
    await writeNote("37", late);
    await rowWith(page, late).waitFor(TIMEOUT);
    open();
    const expected = report.release.together.notesAfter + 2;
    await page.locator(".kind-choice", { hasText: /^\s*note/ })
      .locator(".count", { hasText: new RegExp(`^${expected}$`) }).waitFor(TIMEOUT);
    report.release.duringCall = { expected, shown: Number(await noteCount.innerText()) };
  });

  report.step = "a step's first line adds its span to the timeline, live";
  await part("ganttLive", async () => {
    const spans = page.locator(".gantt [data-span]");
    const before = await spans.count();
    await page.evaluate(() => {
      window.__sameDocument = true; // gone, should the page load again
    });
    await writeLine("37", "step.status", { from: "pending", to: "running", module: "rewards" }, "3706", 2);
    await page.locator('.gantt [data-span][data-step="3706"][data-state="running"]').waitFor(TIMEOUT);
    report.ganttLive = {
      before,
      after: await spans.count(),
      open: await page.locator('.gantt [data-span][data-step="3706"]').getAttribute("data-open"),
      sameDocument: await page.evaluate(() => window.__sameDocument === true),
    };
  });

  report.step = "every kind's detail in words";
  await part("kinds", async () => {
    await page.goto(`${baseURL}/runs/${kindsRun}`);
    await page.locator("[data-holds-loaded]").waitFor(TIMEOUT);
    await page.locator("[data-line]").first().waitFor(TIMEOUT);
    report.kinds = await page.locator("[data-line]").evaluateAll((rows) =>
      rows.map((row) => ({
        kind: row.querySelector(".kind-cell").textContent,
        summary: row.querySelector(".summary").textContent,
      })),
    );
  });

  report.step = "a link to the oldest line of a long run, five times";
  report.oldest = { lineId: oldestLine, tries: [] };
  await part("oldestLink", async () => {
    for (let attempt = 0; attempt < 5; attempt++) {
      await page.goto(`${baseURL}/runs/${longRun}?line=${oldestLine}`);
      await page.locator("[data-holds-loaded]").waitFor(TIMEOUT);
      await page.locator("[data-line]").first().waitFor(TIMEOUT);
      // Whatever the page still loads (newer lines above the line) has come.
      await page.waitForLoadState("networkidle");
      report.oldest.tries.push(await lineShown(page, oldestLine));
    }
    await page.screenshot({ path: path.join(artifacts, "run-page-oldest.png") });
  });
  await page.goto(`${baseURL}/runs/37`);
  await page.locator("[data-line]").first().waitFor(TIMEOUT);

  report.step = "open a line's link";
  const target = page.locator("[data-line]").nth(5);
  const lineId = await target.getAttribute("data-line");
  const href = await target.locator(".at a").getAttribute("href");
  // In the same tab: the token is kept for the tab (sessionStorage).
  const linked = page;
  await linked.goto(new URL(href, page.url()).toString());
  const highlighted = linked.locator(".row.highlight");
  await highlighted.waitFor(TIMEOUT);
  report.lineLink = {
    lineId,
    href,
    highlighted: await highlighted.getAttribute("data-line"),
    current: await highlighted.getAttribute("aria-current"),
    inView: await highlighted.isVisible(),
  };
  await linked.screenshot({ path: path.join(artifacts, "run-page-line.png"), fullPage: true });

  report.step = "move between lines with the keyboard";
  await page.locator("[data-line] .at a").first().focus();
  const focusedLine = () => page.evaluate(() => document.activeElement?.closest("[data-line]")?.dataset.line ?? null);
  const rowIds = await page.locator("[data-line]").evaluateAll((rows) => rows.map((row) => row.dataset.line));
  await page.keyboard.press("ArrowDown");
  await page.waitForFunction((id) => document.activeElement?.closest("[data-line]")?.dataset.line === id, rowIds[1], TIMEOUT);
  await page.keyboard.press("Enter"); // the line's detail opens
  await page.locator(".line-detail").waitFor(TIMEOUT);
  report.keyboard = { rows: rowIds.slice(0, 2), focused: await focusedLine(), detail: await page.locator(".line-detail h3").innerText() };

  report.step = "times in local time, remembered";
  await page.getByLabel("Times").selectOption("local");
  await page.waitForFunction(() => !document.querySelector("[data-line] .at").textContent.includes("UTC"), null, TIMEOUT);
  await page.reload();
  await page.locator("[data-line]").first().waitFor(TIMEOUT);
  report.times = {
    chosen: await page.getByLabel("Times").inputValue(),
    first: await page.locator("[data-line] .at").first().innerText(),
  };
  await page.getByLabel("Times").selectOption("utc");
  report.cspViolations = await page.evaluate(() => window.__cspViolations);
  report.step = null;
} catch (error) {
  report.error = `${report.step}: ${error}`;
  if (page !== null) await page.screenshot({ path: path.join(artifacts, "run-page-failed.png") }).catch(() => {});
} finally {
  await context.close();
}
process.stdout.write(JSON.stringify({ ...report, ...seen }) + "\n");
process.exitCode = report.error === null ? 0 : 1;
