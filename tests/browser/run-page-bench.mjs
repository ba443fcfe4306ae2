// The run page's figures on a big run, for bench/run_page.py: from
// navigation start, when the first row and the holds were drawn, and how
// many rows the DOM holds, on opening and after scrolling to the end of what
// was loaded a few times (each scroll waits for the next page to arrive).
//
//   node run-page-bench.mjs RUN_PAGE_URL [LINE_ID]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const [url, lineId] = process.argv.slice(2);
const TIMEOUT = { timeout: 60000 };
const context = await chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), "runlog-chromium-")), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
try {
  // When each element first appears, in ms since navigation start.
  await context.addInitScript(() => {
    window.__marks = {};
    const marks = { firstRow: "[data-line]", holds: "[data-holds-loaded]" };
    new MutationObserver(() => {
      for (const [name, selector] of Object.entries(marks)) {
        if (window.__marks[name] === undefined && document.querySelector(selector)) {
          window.__marks[name] = Math.round(performance.now());
        }
      }
    }).observe(document, { childList: true, subtree: true, attributes: true });
  });
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(url);
  await page.locator("[data-line]").first().waitFor(TIMEOUT);
  await page.locator("[data-holds-loaded]").waitFor(TIMEOUT);
  const loaded = async () => Number(/(\d+) lines loaded/.exec(await page.locator(".loaded").innerText())[1]);
  const figures = {
    ...(await page.evaluate(() => window.__marks)),
    rowsInDom: await page.locator("[data-line]").count(),
    linesLoaded: await loaded(),
    scrolled: [],
  };
  for (let i = 0; i < 5; i++) {
    const before = await loaded();
    const started = Date.now();
    await page.locator(".scroll").evaluate((element) => {
      element.scrollTop = element.scrollHeight;
    });
    await page.waitForFunction((n) => Number(/(\d+) lines loaded/.exec(document.querySelector(".loaded").textContent)[1]) > n, before, TIMEOUT);
    figures.scrolled.push({
      msToNextPage: Date.now() - started,
      linesLoaded: await loaded(),
      rowsInDom: await page.locator("[data-line]").count(),
    });
  }
  // The link of a line in the middle of the run: the page opens around it.
  if (lineId) {
    const linked = await context.newPage();
    await linked.goto(`${url}?line=${lineId}`);
    await linked.locator(`.row.highlight[data-line="${lineId}"]`).waitFor(TIMEOUT);
    figures.lineLink = {
      highlighted: Math.round(await linked.evaluate(() => performance.now())),
      rowsInDom: await linked.locator("[data-line]").count(),
      inView: await linked.locator(".row.highlight").isVisible(),
    };
  }
  process.stdout.write(JSON.stringify(figures) + "\n");
} finally {
  await context.close();
}
