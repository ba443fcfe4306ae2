// The run page (served by gql/run_page.py): /runs lists the runs in flight,
// /runs/{runId} shows one run's holds, phases and lines, live.
//
// A worked example for a frontend author: everything comes from the public API
// at /graphql, with the shipped operations in gql/operations/ (RunsInFlight,
// RunHead, RunLines, RunTail), sent by `documentId` when the server runs with
// trusted documents and as their text otherwise, with the reader's bearer
// token (kept in sessionStorage) as `Authorization`, and in the websocket's
// connection_init payload. Drawn with preact and htm (no build step: this file
// is served as written); the tail is graphql-ws's client; times and the Gantt
// chart of the run's timeline are runpage-timeline.js's.
"use strict";

(function () {
  const { h, render } = preact;
  const { useState, useEffect, useLayoutEffect, useRef, useCallback } = preactHooks;
  const html = htm.bind(h);
  const { useTimes, formatTime, lasted, skewOf, HeldFor, Phases } = runpageTimeline;
  const CONFIG = JSON.parse(document.getElementById("runpage-config").textContent);
  const ROOT = CONFIG.root;
  const GRAPHQL_URL = new URL(ROOT + "graphql", window.location.href).toString();
  const WS_URL = GRAPHQL_URL.replace(/^http/, "ws");
  const TOKEN_KEY = "runlog:token";
  const ROW_HEIGHT = 30; // px: every row of the table is one line high (the windowing relies on it)
  const PAGE_SIZE = 200; // lines per call: a screenful and a page more
  const OVERSCAN = 10; // rows drawn above and below the visible ones

  function runUrl(runId, search) {
    return ROOT + "runs/" + encodeURIComponent(runId) + (search ?? "");
  }

  // ── calls ────────────────────────────────────────────────────────────────

  function authorization() {
    const token = window.sessionStorage.getItem(TOKEN_KEY);
    return token ? "Bearer " + token : null;
  }

  // A call the service refused or could not answer; its message says which and why.
  class Refused extends Error {}

  function refusal(name, errors) {
    const said = errors
      .map((error) => {
        const code = error.extensions?.code ? ` [${error.extensions.code}]` : "";
        const id = error.extensions?.requestId ? ` (request ${error.extensions.requestId})` : "";
        return error.message + code + id;
      })
      .join("; ");
    return new Refused(`${name} was refused: ${said}`);
  }

  async function call(name, variables) {
    const operation = CONFIG.operations[name];
    const body = CONFIG.trustedDocuments
      ? { documentId: operation.documentId, variables }
      : { query: operation.query, variables };
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    const auth = authorization();
    if (auth) headers.Authorization = auth;
    let response;
    try {
      response = await fetch(GRAPHQL_URL, { method: "POST", headers, body: JSON.stringify(body) });
    } catch (error) {
      throw new Refused(`${name}: the service did not answer (${error.message})`);
    }
    let answer = null;
    try {
      answer = await response.json();
    } catch {
      // Not JSON: said below with the status.
    }
    if (answer?.errors?.length) throw refusal(name, answer.errors);
    if (!response.ok || !answer?.data) throw new Refused(`${name} was refused: HTTP ${response.status}`);
    return answer.data;
  }

  // ── the URL: filters and the line opened ────────────────────────────────

  const LIST_PARAMS = ["kind", "phase", "step"];
  const TEXT_PARAMS = ["since", "until", "q", "line"];
  // /runs: the runs held so (runsInFlight's filters, by their own names).
  const RUNS_LISTS = ["reason"];
  const RUNS_TEXTS = ["blockingRunId", "concurrencyKey"];

  function readFilters(lists = LIST_PARAMS, texts = TEXT_PARAMS) {
    const params = new URLSearchParams(window.location.search);
    const filters = {};
    for (const key of lists) filters[key] = params.getAll(key).filter(Boolean);
    for (const key of texts) filters[key] = params.get(key) ?? "";
    return filters;
  }

  function writeFilters(filters, lists = LIST_PARAMS, texts = TEXT_PARAMS) {
    const params = new URLSearchParams();
    for (const key of lists) for (const value of filters[key]) params.append(key, value);
    for (const key of texts) if (filters[key]) params.set(key, filters[key]);
    const search = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (search ? "?" + search : ""));
  }

  // The filters as the operations' variables: RunTail takes those a live line
  // can be held to (`tail`), RunLines them all and the line to open around.
  function filterVariables(filters, tail = false) {
    const variables = { runId: CONFIG.runId };
    if (filters.kind.length) variables.kinds = filters.kind;
    if (filters.phase.length) variables.phase = filters.phase.map(Number);
    if (filters.step.length) variables.stepId = filters.step;
    if (filters.q) variables.search = filters.q;
    if (tail) return variables;
    if (filters.since) variables.since = filters.since;
    if (filters.until) variables.until = filters.until;
    if (filters.line) variables.around = filters.line;
    return variables;
  }

  // Whether this server's runLog finds a line (phase, step, time, text,
  // around): RunLines then takes them. Where it does not, those filters are
  // not offered rather than silently ignored.
  const FINDS = /\$stepId\b/.test(CONFIG.operations.RunLines.query);

  const NO_FILTERS = { kind: [], phase: [], step: [], since: "", until: "", q: "", line: "" };

  // ── kinds: a family each, shown by colour, icon and word ───────────────

  const FAMILIES = {
    failure: { icon: "✖", word: "failure" },
    refusal: { icon: "⊘", word: "refusal" },
    wait: { icon: "‖", word: "wait" },
    progress: { icon: "✔", word: "progress" },
    info: { icon: "•", word: "info" },
  };
  const FAMILY_OF_KIND = {
    "cleanup.failed": "failure",
    "step.retry": "failure",
    "resource.orphaned": "failure",
    "step.refused": "refusal",
    "run.blocked": "wait",
    "step.parked": "wait",
    "phase.gate": "wait",
    "phase.advanced": "progress",
    "phase.completed": "progress",
    "cleanup.reverted": "progress",
    "version.verified": "progress",
  };

  function familyOf(line) {
    if (line.detail?.__typename === "UnreadableDetail" || line.problem) return "failure";
    if (line.detail?.__typename === "ConditionEvaluatedDetail") return line.detail.matched ? "progress" : "info";
    if (line.detail?.__typename === "RunStatusDetail" && line.detail.to === "failed") return "failure";
    return FAMILY_OF_KIND[line.kindName] ?? "info";
  }

  function KindBadge({ line }) {
    const family = familyOf(line);
    const { icon, word } = FAMILIES[family];
    return html`<span class=${"kind family-" + family} title=${word}>
      <span aria-hidden="true">${icon}</span> ${line.kindName}<span class="visually-hidden"> (${word})</span>
    </span>`;
  }

  // ── a line's detail, by its type ────────────────────────────────────────

  function RunLink({ id, children }) {
    return html`<a href=${runUrl(id)}>${children ?? "run " + id}</a>`;
  }

  // A value of a detail's free-form field (an answer, a gate's parameters,
  // a firing's facts) as words: `region Yew, boss Lich Lord`, never JSON.
  function words(value) {
    if (value === null || value === undefined) return "—";
    if (Array.isArray(value)) return value.map(words).join(", ");
    if (typeof value === "object") {
      return Object.entries(value)
        .map(([key, inner]) => `${key} ${words(inner)}`)
        .join(", ");
    }
    return String(value);
  }

  // The `[label, value]` parts whose value is given, as `label value`, joined by commas.
  function given(parts) {
    return parts
      .filter(([, value]) => value !== null && value !== undefined && value !== "")
      .map(([label, value]) => (label ? `${label} ${value}` : String(value)))
      .join(", ");
  }

  // Why a step was refused, naming the switch an operator would change.
  function refusalWords(d) {
    if (d.refusal === "OVER_CAP") {
      const over = `over the ${d.cap ?? "—"} cap${d.used != null ? `, ${d.used} of ${d.limit ?? "—"} used` : ""}`;
      return `${over}; ${d.switch ? "raise " + d.switch : "no switch sets it (the default applies)"}`;
    }
    if (d.refusal === "DISABLED") return `disabled${d.switch ? " by " + d.switch : ""}`;
    return given([["", d.refusal], ["cap", d.cap], ["switch", d.switch]]);
  }

  // A line's detail in words, by its type: every kind's (no JSON in the table).
  function summary(line, times) {
    const d = line.detail;
    if (d === null || d === undefined) return line.problem ?? "";
    const at = (iso) => (iso ? formatTime(iso, times) : null);
    switch (d.__typename) {
      case "RunCreatedDetail":
        return `event ${d.eventId}${d.eventVersion ? ", version " + d.eventVersion : ""}${d.scheduledFor ? ", scheduled for " + at(d.scheduledFor) : ""}`;
      case "RunBlockedDetail": {
        const state = d.blockingRun
          ? d.blockingRun.terminal
            ? ` (it has ended: ${d.blockingRun.status})`
            : ` (it is ${d.blockingRun.status})`
          : " (no such run any more)";
        return html`blocked by <${RunLink} id=${d.blockingRunId} />, which holds ${d.concurrencyKey}${state}`;
      }
      case "ConditionEvaluatedDetail": {
        const firing = `${d.firing ?? "a firing"}${d.facts ? " (" + words(d.facts) + ")" : ""}`;
        return d.matched
          ? html`<span>${firing} matched ${d.condition}</span>`
          : html`<span>${firing} did not match ${d.condition}: ${d.mismatch ?? "no mismatch given"}</span>`;
      }
      case "UnreadableDetail":
        return html`<span>unreadable: ${d.text} — ${d.problem}</span>`;
      case "NoteDetail":
        return `${d.text}${d.actor ? " — " + d.actor : ""}`;
      case "RunStatusDetail":
      case "RunHealthDetail":
        return `${d.from ?? "∅"} → ${d.to}${d.reason ? ": " + d.reason : ""}`;
      case "StepStatusDetail":
        return `${d.from ?? "∅"} → ${d.to}${d.module ? " (" + d.module + ")" : ""}${d.answer != null ? ": " + words(d.answer) : ""}`;
      case "StepParkedDetail":
        return `waiting for ${d.waitingFor}${d.reason ? ": " + d.reason : ""}`;
      case "StepRetryDetail":
        return `attempt ${d.attempt} of ${d.maxAttempts}: ${d.error}${d.retryAt ? "; next at " + at(d.retryAt) : ""}`;
      case "StepRefusedDetail":
        return refusalWords(d);
      case "PhaseGateDetail":
        return `waits for ${d.condition}${d.parameters ? " (" + words(d.parameters) + ")" : ""}${d.deadline ? " until " + at(d.deadline) : ""}`;
      case "PhaseAdvancedDetail":
        return `via ${given([["", d.via], ["firing", d.firing], ["deadline", at(d.deadline)], ["by", d.actor]])}`;
      case "PhaseCompletedDetail":
        return `${d.stepCount} steps: ${(d.byStatus ?? []).map((b) => `${b.count} ${b.status}`).join(", ")}`;
      case "RunBudgetDetail":
        return `caps: ${(d.caps ?? [])
          .map((c) => `${c.cap} ${c.limit} (${c.switch ? "set by " + c.switch : "the default"})`)
          .join(", ")}`;
      case "VersionVerifiedDetail":
        return d.dryRunId
          ? html`version ${d.version} verified by dry <${RunLink} id=${d.dryRunId} />`
          : `version ${d.version} verified`;
      case "ResourceRecordedDetail":
        return `${d.resourceType} ${d.resourceId} (${d.externalId}), ${d.ownership}`;
      case "ResourceOrphanedDetail":
        return `${d.resourceType} ${d.resourceId} (${d.externalId}) orphaned${d.reason ? ": " + d.reason : ""}`;
      case "CleanupRevertedDetail":
        return `group ${d.group} came back: resources ${(d.resourceIds ?? []).join(", ")}`;
      case "CleanupFailedDetail":
        return `group ${d.group} did not come back (attempt ${d.attempt}): ${d.error}; left as ${d.leftAs}; resources ${(d.resourceIds ?? []).join(", ")}`;
      case "CleanupSweptDetail":
        return `checked ${d.checked}: ${d.reverted} reverted, ${d.failed} failed, ${d.orphaned} orphaned, ${d.remaining} remaining`;
      case "CleanupRetryDetail":
        return `group ${d.group} asked again${d.actor ? " by " + d.actor : ""}, after ${d.previousAttempts} attempts`;
      case "PhaseEnteredDetail":
        return `steps ${(d.stepIds ?? []).join(", ")}`;
      default: {
        // A type this page does not know yet (a newer server): its fields, as words.
        const { __typename, ...fields } = d;
        return words(fields);
      }
    }
  }

  function LineDetail({ line, times, onClose }) {
    const { __typename, ...fields } = line.detail ?? {};
    return html`<section class="line-detail" aria-labelledby="line-detail-title">
      <h3 id="line-detail-title">Line ${line.id}: ${line.kindName}</h3>
      <p>
        <${KindBadge} line=${line} /> at ${formatTime(line.at, times)}
        ${line.phase !== null ? ` · phase ${line.phase}` : ""}${line.stepId ? ` · step ${line.stepId}` : ""}
        · <a href=${runUrl(line.runId, "?line=" + encodeURIComponent(line.id))}>link to this line</a>
      </p>
      ${line.problem ? html`<p class="problem">Problem: ${line.problem}</p>` : null}
      <p>${summary(line, times)}</p>
      <pre>${__typename ? __typename + " " + JSON.stringify(fields, null, 2) : "no detail"}</pre>
      <button type="button" onClick=${onClose}>Close</button>
    </section>`;
  }

  // ── the token box and the refusals ──────────────────────────────────────

  function TokenBox({ onChange }) {
    const [value, setValue] = useState(window.sessionStorage.getItem(TOKEN_KEY) ?? "");
    const save = (event) => {
      event.preventDefault();
      if (value) window.sessionStorage.setItem(TOKEN_KEY, value);
      else window.sessionStorage.removeItem(TOKEN_KEY);
      onChange();
    };
    return html`<form class="token" onSubmit=${save}>
      <label for="token">Bearer token</label>
      <input id="token" type="password" autocomplete="off" value=${value}
        onInput=${(event) => setValue(event.target.value)} />
      <button type="submit">Use token</button>
    </form>`;
  }

  function Problems({ problems }) {
    if (!problems.length) return null;
    return html`<div class="problems" role="alert">
      ${problems.map((problem) => html`<p>${problem}</p>`)}
    </div>`;
  }

  function Header({ title, times, setTimes, onToken }) {
    return html`<header>
      <nav aria-label="Pages"><a href=${ROOT + "runs"}>Runs in flight</a> · <a href=${ROOT + "graphql"}>GraphiQL</a></nav>
      <h1>${title}</h1>
      <div class="settings">
        <${TokenBox} onChange=${onToken} />
        <label for="times">Times</label>
        <select id="times" value=${times} onChange=${(event) => setTimes(event.target.value)}>
          <option value="utc">UTC</option>
          <option value="local">local</option>
        </select>
      </div>
    </header>`;
  }

  // ── /runs ────────────────────────────────────────────────────────────────

  function OpenRun() {
    const [id, setId] = useState("");
    const open = (event) => {
      event.preventDefault();
      if (id.trim()) window.location.href = runUrl(id.trim());
    };
    return html`<form class="open-run" onSubmit=${open}>
      <label for="open-run-id">Run id</label>
      <input id="open-run-id" inputmode="numeric" value=${id} onInput=${(event) => setId(event.target.value)} />
      <button type="submit">Open run</button>
    </form>`;
  }

  // A filter's text box, for `text[key]` (a form's state, set by `setText`).
  function textField(text, setText, key, label, hint) {
    return html`<div class="field">
      <label for=${"filter-" + key}>${label}</label>
      <input id=${"filter-" + key} value=${text[key]} placeholder=${hint}
        onInput=${(event) => setText({ ...text, [key]: event.target.value })} />
    </div>`;
  }

  // Which runs to list, by what holds them; kept in the URL.
  function RunFilters({ filters, setFilters }) {
    const [text, setText] = useState({ blockingRunId: filters.blockingRunId, concurrencyKey: filters.concurrencyKey });
    const toggle = (reason) =>
      setFilters({ ...filters, reason: filters.reason.includes(reason) ? filters.reason.filter((r) => r !== reason) : [...filters.reason, reason] });
    const apply = (event) => {
      event.preventDefault();
      setFilters({ ...filters, blockingRunId: text.blockingRunId.trim(), concurrencyKey: text.concurrencyKey.trim() });
    };
    const field = (key, label, hint) => textField(text, setText, key, label, hint);
    return html`<section class="filters" aria-labelledby="run-filters-title">
      <h2 id="run-filters-title">Held by</h2>
      <fieldset class="kinds">
        <legend>A hold for one of these reasons (none ticked: any run in flight)</legend>
        ${CONFIG.holdReasons.map(
          ({ reason, words }) => html`<label class="kind-choice" key=${reason} title=${words}>
            <input type="checkbox" name="reason" value=${reason} checked=${filters.reason.includes(reason)}
              onChange=${() => toggle(reason)} /> ${reason}
          </label>`,
        )}
      </fieldset>
      <form onSubmit=${apply} class="text-filters">
        ${field("blockingRunId", "Blocked by run", "37")}
        ${field("concurrencyKey", "On the concurrency key", "invasion:Yew")}
        <button type="submit">Apply filters</button>
        <span class="hint">Filters given together must all hold.</span>
      </form>
    </section>`;
  }

  function RunsPage() {
    const [times, setTimes] = useTimes();
    const [generation, setGeneration] = useState(0);
    const [problems, setProblems] = useState([]);
    const [runs, setRuns] = useState(null);
    const [pageInfo, setPageInfo] = useState(null);
    const [filters, setFiltersState] = useState(() => readFilters(RUNS_LISTS, RUNS_TEXTS));
    const setFilters = (next) => {
      writeFilters(next, RUNS_LISTS, RUNS_TEXTS);
      setFiltersState(next);
    };
    const filtered = Boolean(filters.reason.length || filters.blockingRunId || filters.concurrencyKey);
    const latest = useRef(filters);
    latest.current = filters;

    const load = useCallback(async (after) => {
      const variables = { limit: 50, after };
      if (filters.reason.length) variables.reason = filters.reason;
      if (filters.blockingRunId) variables.blockingRunId = filters.blockingRunId;
      if (filters.concurrencyKey) variables.concurrencyKey = filters.concurrencyKey;
      try {
        const data = await call("RunsInFlight", variables);
        if (latest.current !== filters) return; // the filters changed while it was asked
        const page = data.runsInFlight;
        setRuns((before) => (after ? [...(before ?? []), ...page.nodes] : page.nodes));
        setPageInfo(page.pageInfo);
        setProblems([]);
      } catch (error) {
        setProblems([error.message]);
      }
    }, [filters]);
    useEffect(() => {
      setRuns(null);
      if (CONFIG.operations.RunsInFlight) load(null);
    }, [generation, filters]);

    return html`<${Header} title="Runs in flight" times=${times} setTimes=${setTimes}
        onToken=${() => setGeneration((n) => n + 1)} />
      <main>
        <${Problems} problems=${problems} />
        <${OpenRun} />
        <${RunFilters} filters=${filters} setFilters=${setFilters} key=${generation + JSON.stringify(filters)} />
        ${runs === null
          ? html`<p>${CONFIG.operations.RunsInFlight ? "Loading the runs in flight…" : ""}</p>`
          : runs.length === 0
            ? html`<p>${filtered ? "No run in flight is held so." : "No run is in flight."}</p>`
            : html`<table class="runs">
                <caption>Runs in flight${filtered ? " held so" : ""}, newest activity first</caption>
                <thead><tr><th scope="col">Run</th><th scope="col">Status</th><th scope="col">What holds it</th>
                  <th scope="col">Held</th><th scope="col">Last line</th><th scope="col">Updated</th></tr></thead>
                <tbody>
                  ${runs.map(
                    (run) => html`<tr key=${run.id} data-run=${run.id}>
                      <td><${RunLink} id=${run.id} /></td>
                      <td>${run.status}</td>
                      <td class="headline">${run.headline}</td>
                      <td class="held">${run.holds?.length ? `for ${lasted(run.holds[0].heldForSeconds)}` : "—"}</td>
                      <td class="last-line">${formatTime(run.lastLineAt, times)}</td>
                      <td>${formatTime(run.updatedAt, times)}</td>
                    </tr>`,
                  )}
                </tbody>
              </table>`}
        ${pageInfo?.hasNextPage
          ? html`<button type="button" onClick=${() => load(pageInfo.endCursor)}>More runs</button>`
          : null}
      </main>`;
  }

  // ── /runs/{runId}: the table of lines ───────────────────────────────────

  // Only the rows in view (and OVERSCAN more each side) are in the DOM; the
  // inner element is as tall as every loaded row, so the scrollbar is true.
  // `highlight` (a line's link) is scrolled into view once its row is drawn
  // and kept there while lines or the head load above it, until the reader
  // scrolls or types.
  function LineTable({ lines, times, highlight, selected, onSelect, onNearEnd, more, scrollRef, onScroll }) {
    const [view, setView] = useState({ top: 0, height: 600 });
    const pinned = useRef(null);
    // A layout effect, so the pin is set before the one below first draws it.
    useLayoutEffect(() => {
      pinned.current = highlight || null;
      const release = () => {
        pinned.current = null;
      };
      const events = ["wheel", "touchstart", "keydown", "mousedown"];
      for (const name of events) window.addEventListener(name, release, { passive: true });
      return () => events.forEach((name) => window.removeEventListener(name, release));
    }, [highlight]);
    const measure = () => {
      const element = scrollRef.current;
      if (!element) return;
      setView({ top: element.scrollTop, height: element.clientHeight });
      if (element.scrollTop + element.clientHeight > element.scrollHeight - 5 * ROW_HEIGHT) onNearEnd("older");
      if (element.scrollTop < 5 * ROW_HEIGHT) onNearEnd("newer");
      onScroll?.(element.scrollTop);
    };
    useEffect(() => {
      measure();
      window.addEventListener("resize", measure);
      return () => window.removeEventListener("resize", measure);
    }, [lines.length]);

    // Lines put on top move the rows down: a reader scrolled down keeps the
    // rows they were reading, once the taller table is drawn (set before,
    // the browser would clip the scroll to the shorter one).
    const firstId = useRef(null);
    useLayoutEffect(() => {
      const element = scrollRef.current;
      const before = firstId.current;
      firstId.current = lines[0]?.id ?? null;
      if (!element || before === null || pinned.current) return;
      const added = lines.findIndex((line) => line.id === before);
      if (added > 0 && element.scrollTop > 0) element.scrollTop += added * ROW_HEIGHT;
    }, [lines]);

    // The linked line, after every drawing (its own rows, or the head above
    // the table growing): in the middle of the table, and the table's row in
    // the window.
    const showPinned = () => {
      const element = scrollRef.current;
      const index = pinned.current ? lines.findIndex((line) => line.id === pinned.current) : -1;
      if (!element || index < 0) return;
      const top = Math.max(0, index * ROW_HEIGHT - element.clientHeight / 2 + ROW_HEIGHT / 2);
      if (Math.abs(element.scrollTop - top) >= 1) element.scrollTop = top;
      const row = element.querySelector(`[data-line="${CSS.escape(pinned.current)}"]`);
      if (row === null) {
        // Not drawn yet at this scroll: draw the rows there, then come back.
        if (view.top !== element.scrollTop || view.height !== element.clientHeight) {
          setView({ top: element.scrollTop, height: element.clientHeight });
        }
        return;
      }
      const box = row.getBoundingClientRect();
      if (box.top < 0 || box.bottom > window.innerHeight) row.scrollIntoView({ block: "center" });
    };
    useLayoutEffect(showPinned);
    const showLatest = useRef(showPinned);
    showLatest.current = showPinned;
    useEffect(() => {
      // Whatever else moves the table (a font, the head, a resize) after it was drawn.
      const observer = new ResizeObserver(() => showLatest.current());
      observer.observe(document.body);
      return () => observer.disconnect();
    }, []);
    const first = Math.max(0, Math.floor(view.top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(lines.length, Math.ceil((view.top + view.height) / ROW_HEIGHT) + OVERSCAN);
    const rows = [];
    for (let i = first; i < last; i++) {
      const line = lines[i];
      const classes = ["row", "family-" + familyOf(line)];
      if (line.id === highlight) classes.push("highlight");
      if (line.id === selected) classes.push("selected");
      rows.push(html`<div role="row" class=${classes.join(" ")} key=${line.id} data-line=${line.id}
          aria-rowindex=${i + 2} aria-current=${line.id === highlight ? "true" : undefined}
          style=${`top:${i * ROW_HEIGHT}px`}>
        <span role="cell" class="at">
          <a href=${runUrl(line.runId, "?line=" + encodeURIComponent(line.id))}
            onClick=${(event) => { event.preventDefault(); onSelect(line); }}>${formatTime(line.at, times)}</a>
        </span>
        <span role="cell" class="kind-cell"><${KindBadge} line=${line} /></span>
        <span role="cell" class="phase">${line.phase ?? ""}</span>
        <span role="cell" class="step">${line.stepId ?? ""}</span>
        <span role="cell" class="summary">${summary(line, times)}</span>
      </div>`);
    }
    // Up and down move between the rows' links, scrolling the next into view.
    const onKeyDown = (event) => {
      if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
      const row = event.target.closest?.("[data-line]");
      if (!row) return;
      event.preventDefault();
      const index = lines.findIndex((line) => line.id === row.dataset.line) + (event.key === "ArrowDown" ? 1 : -1);
      if (index < 0 || index >= lines.length) return;
      const element = scrollRef.current;
      const top = index * ROW_HEIGHT;
      if (top < element.scrollTop) element.scrollTop = top;
      else if (top + ROW_HEIGHT > element.scrollTop + element.clientHeight) element.scrollTop = top + ROW_HEIGHT - element.clientHeight;
      measure();
      window.requestAnimationFrame(() =>
        element.querySelector(`[data-line="${CSS.escape(lines[index].id)}"] a`)?.focus(),
      );
    };
    return html`<div class="table" role="table" aria-label="Lines, newest first" aria-rowcount=${lines.length + 1}>
      <div role="rowgroup" class="thead">
        <div role="row" class="row head" aria-rowindex="1">
          <span role="columnheader" class="at">Time</span>
          <span role="columnheader" class="kind-cell">Kind</span>
          <span role="columnheader" class="phase">Phase</span>
          <span role="columnheader" class="step">Step</span>
          <span role="columnheader" class="summary">Detail</span>
        </div>
      </div>
      <div role="rowgroup" class="scroll" ref=${scrollRef} onScroll=${measure} onKeyDown=${onKeyDown} tabindex="0"
        aria-label="Lines">
        <div class="rows" style=${`height:${(lines.length + (more ? 1 : 0)) * ROW_HEIGHT}px`}>${rows}</div>
      </div>
    </div>`;
  }

  // ── /runs/{runId}: filters ───────────────────────────────────────────────

  function Filters({ filters, setFilters, kinds }) {
    const [text, setText] = useState({ since: filters.since, until: filters.until, q: filters.q, phase: filters.phase.join(","), step: filters.step.join(",") });
    const apply = (event) => {
      event.preventDefault();
      const list = (value) => value.split(",").map((part) => part.trim()).filter(Boolean);
      setFilters({ ...filters, since: text.since, until: text.until, q: text.q, phase: list(text.phase), step: list(text.step), line: "" });
    };
    const toggleKind = (kind) => {
      const kindList = filters.kind.includes(kind) ? filters.kind.filter((k) => k !== kind) : [...filters.kind, kind];
      setFilters({ ...filters, kind: kindList, line: "" });
    };
    const field = (key, label, hint) => textField(text, setText, key, label, hint);
    return html`<section class="filters" aria-labelledby="filters-title">
      <h2 id="filters-title">Filters</h2>
      <fieldset class="kinds">
        <legend>Kinds (none ticked: every kind)</legend>
        ${kinds.map(
          ({ kind, kindName, count }) => html`<label class="kind-choice" key=${kind}>
            <input type="checkbox" name="kind" value=${kind} checked=${filters.kind.includes(kind)}
              onChange=${() => toggleKind(kind)} />
            ${kindName}${count === undefined ? "" : html` <span class="count">${count}</span>`}
          </label>`,
        )}
      </fieldset>
      ${FINDS ? null : html`<p>This server's runLog does not filter by phase, step, time or text.</p>`}
      <form onSubmit=${apply} class="text-filters" hidden=${!FINDS}>
        ${field("phase", "Phases", "1,2")}
        ${field("step", "Steps", "step ids, comma separated")}
        ${field("since", "Since (UTC)", "2026-12-02T05:00:00Z")}
        ${field("until", "Until (UTC)", "2026-12-02T06:00:00Z")}
        ${field("q", "Text", "words in the detail")}
        <button type="submit">Apply filters</button>
      </form>
    </section>`;
  }

  // ── /runs/{runId} ────────────────────────────────────────────────────────

  function RunView() {
    const [times, setTimes] = useTimes();
    const [filters, setFiltersState] = useState(readFilters);
    const [generation, setGeneration] = useState(0);
    const [head, setHead] = useState(null);
    const [problems, setProblems] = useState({});
    const [lines, setLines] = useState([]);
    const [kindCounts, setKindCounts] = useState(null);
    const [older, setOlder] = useState({ more: false, cursor: null });
    const [newer, setNewer] = useState({ more: false, cursor: null });
    const [selected, setSelected] = useState(null);
    const [tail, setTail] = useState({ state: "off", text: "" });
    const [ready, setReady] = useState(false); // the first page of lines is in
    const [scanStopped, setScanStopped] = useState(false); // a search page stopped reading before it was full
    const scrollRef = useRef(null);
    const loading = useRef({ older: false, newer: false });
    const live = useRef(null); // the newest cursor the page holds, for the tail's `since`

    const problem = (key, error) => setProblems((before) => ({ ...before, [key]: error ? error.message : null }));
    const setFilters = (next) => {
      writeFilters(next);
      setFiltersState(next);
    };

    // The head (what holds the run, its headline, phases and steps) and the
    // counts beside the kind filter (under every filter, the text search's
    // too), from one RunHead call: on opening, when
    // a filter or the token changes, and when the tail brings lines. The
    // server's derivation is the page's only truth; the page never works a
    // hold out from the lines itself. At most one call is in flight: lines
    // that arrive during it cause one more after it, not one each.
    const headCalls = useRef({ inFlight: false, again: false });
    const latestFilters = useRef(filters);
    latestFilters.current = filters;
    const refreshHead = () => {
      const calls = headCalls.current;
      if (calls.inFlight) {
        calls.again = true;
        return;
      }
      calls.inFlight = true;
      calls.again = false;
      const asked = latestFilters.current;
      // The counts follow the text search too: the matches of each kind.
      const { kinds, around, ...variables } = filterVariables(asked);
      call("RunHead", variables)
        .then((data) => {
          const run = data.runLog.run;
          setHead(run ? { ...run, skew: skewOf(run) } : { missing: true });
          setKindCounts(data.runLog.kindCounts);
          window.__runPageTimings?.holds?.();
          problem("head", null);
        })
        .catch((error) => problem("head", error))
        .finally(() => {
          calls.inFlight = false;
          if (calls.again) refreshHead();
        });
    };
    useEffect(() => {
      setKindCounts(null);
      refreshHead();
    }, [filters.phase.join(), filters.step.join(), filters.since, filters.until, filters.q, generation]);

    // The first page of lines, under the filters (around the opened line, if any).
    useEffect(() => {
      let cancelled = false;
      setLines([]);
      setReady(false);
      live.current = null;
      loading.current = { older: true, newer: true };
      const variables = { ...filterVariables(filters), limit: PAGE_SIZE };
      call("RunLines", variables)
        .then((data) => {
          if (cancelled) return;
          const page = data.runLog;
          setLines(page.nodes);
          setScanStopped(Boolean(page.pageInfo.scanLimitReached));
          setOlder({ more: page.pageInfo.hasNextPage, cursor: page.pageInfo.endCursor });
          setNewer({ more: page.pageInfo.hasPreviousPage, cursor: page.pageInfo.startCursor });
          live.current = page.pageInfo.startCursor;
          setReady(true);
          problem("lines", null);
          window.__runPageTimings?.firstRows?.(page.nodes.length);
        })
        .catch((error) => !cancelled && problem("lines", error))
        .finally(() => {
          loading.current = { older: false, newer: false };
        });
      return () => {
        cancelled = true;
      };
    }, [filters, generation]);

    const loadMore = async (direction) => {
      const state = direction === "older" ? older : newer;
      if (!state.more || loading.current[direction]) return;
      loading.current[direction] = true;
      const variables = { ...filterVariables(filters), limit: PAGE_SIZE };
      delete variables.around; // a cursor goes on from the page it came from
      variables[direction === "older" ? "after" : "before"] = state.cursor;
      try {
        const page = (await call("RunLines", variables)).runLog;
        if (direction === "older") {
          setLines((before) => [...before, ...page.nodes]);
          setScanStopped(Boolean(page.pageInfo.scanLimitReached));
          setOlder({ more: page.pageInfo.hasNextPage, cursor: page.pageInfo.endCursor });
        } else {
          prepend(page.nodes);
          setNewer({ more: page.pageInfo.hasPreviousPage, cursor: page.pageInfo.startCursor ?? state.cursor });
          if (page.pageInfo.startCursor) live.current = page.pageInfo.startCursor;
        }
        problem("lines", null);
      } catch (error) {
        problem("lines", error);
      } finally {
        loading.current[direction] = false;
      }
    };

    // Newer lines go on top (LineTable keeps the rows a reader was reading in view).
    const prepend = (newest) => {
      if (newest.length) setLines((before) => [...newest, ...before]);
    };

    // The tail: once the page holds the newest line under the filters, lines
    // arrive live, from the newest cursor it holds; after a drop, from the
    // newest it has then, so none is missed or doubled.
    const caughtUp = ready && !newer.more && !filters.until;
    useEffect(() => {
      if (!caughtUp || problems.lines) return undefined;
      let stopped = false;
      let unsubscribe = () => {};
      let dropped = null;
      let attempt = 0;
      const client = graphqlWs.createClient({
        url: WS_URL,
        lazy: true,
        retryAttempts: 0, // the page resubscribes itself, from the cursor it has then
        connectionParams: () => (authorization() ? { Authorization: authorization() } : {}),
        on: {
          connected: () => {
            attempt = 0;
            setTail({ state: "live", text: dropped ? `Live again since ${formatTime(new Date().toISOString(), times)}: resumed from the last line the page had.` : "Live: new lines arrive at the top." });
            dropped = null;
          },
          closed: (event) => {
            if (stopped) return;
            dropped = dropped ?? new Date();
            setTail({ state: "dropped", text: `The live connection dropped at ${formatTime(dropped.toISOString(), times)} (${event?.code ?? "no code"}${event?.reason ? ": " + event.reason : ""}); reconnecting…` });
          },
        },
      });
      const subscribe = () => {
        const variables = { ...filterVariables(filters, true), since: live.current };
        unsubscribe = client.subscribe(
          { query: CONFIG.operations.RunTail.query, variables },
          {
            next: (result) => {
              if (result.errors?.length) {
                problem("tail", refusal("RunTail", result.errors));
                return;
              }
              const line = result.data.runLogTail;
              live.current = line.cursor;
              prepend([line]);
              refreshHead(); // the line may end a hold, move a step, add to a count
            },
            error: (error) => {
              if (stopped) return;
              if (Array.isArray(error)) {
                // The service refused the subscription itself: said, not retried.
                problem("tail", refusal("RunTail", error));
                setTail({ state: "refused", text: "The live tail was refused." });
                return;
              }
              attempt += 1;
              const wait = Math.min(10000, 250 * 2 ** Math.min(attempt, 6));
              window.setTimeout(() => !stopped && subscribe(), wait);
            },
            complete: () => {},
          },
        );
      };
      setTail({ state: "connecting", text: "Connecting to the live tail…" });
      problem("tail", null);
      subscribe();
      window.__runPageTail = { client };
      return () => {
        stopped = true;
        unsubscribe();
        client.dispose();
      };
    }, [caughtUp, filters, generation, problems.lines]);

    // Every kind, with what it would give under the other filters beside it.
    const counts = kindCounts && Object.fromEntries(kindCounts.map((k) => [k.kind, k.count]));
    const kinds = CONFIG.kinds.map((k) => ({ ...k, count: counts ? (counts[k.kind] ?? 0) : undefined }));
    // A hold's evidence opens the table around it, under no other filter (it may be outside them).
    const openLine = (id) => setFilters({ ...NO_FILTERS, line: id });
    const toggleStep = (stepId) =>
      setFilters({
        ...filters,
        line: "",
        step: filters.step.includes(stepId) ? filters.step.filter((s) => s !== stepId) : [...filters.step, stepId],
      });
    const title = `Run ${CONFIG.runId}`;
    const shown = Object.values(problems).filter(Boolean);
    return html`<${Header} title=${title} times=${times} setTimes=${setTimes}
        onToken=${() => setGeneration((n) => n + 1)} />
      <main class="run">
        <${Problems} problems=${shown} />
        <${RunHead} head=${head} times=${times} openLine=${openLine} />
        ${head?.phases ? html`<${Phases} run=${head} times=${times} steps=${filters.step} toggleStep=${toggleStep}
          canFilter=${FINDS} noteOf=${(step) => stepNote(step, head.holds)} />` : null}
        <${Filters} filters=${filters} setFilters=${setFilters} kinds=${kinds} key=${generation + JSON.stringify(filters)} />
        <section class="lines" aria-labelledby="lines-title">
          <h2 id="lines-title">Lines</h2>
          <p class="tail-state" role="status" data-state=${tail.state}>${tail.text}</p>
          <p class="loaded">${lines.length} lines loaded${older.more ? ", more as you scroll" : ""}.${scanStopped ? " The search read as many lines as a page may read; scroll on to search further." : ""}</p>
          <${LineTable} lines=${lines} times=${times} highlight=${filters.line} selected=${selected?.id}
            onSelect=${setSelected} onNearEnd=${loadMore} more=${older.more} scrollRef=${scrollRef} />
          ${selected ? html`<${LineDetail} line=${selected} times=${times} onClose=${() => setSelected(null)} />` : null}
        </section>
      </main>`;
  }

  const HOLD_FAMILIES = {
    BLOCKED_BY_RUN: "wait",
    WAITING_AT_GATE: "wait",
    STEP_PARKED: "wait",
    STEP_RETRYING: "failure",
    STEP_REFUSED: "refusal",
    CLEANUP_FAILED: "failure",
  };

  // What holds the run, on top: each hold's sentence, its evidence (links
  // into the table) and the run that blocks it (a link to its own page).
  function RunHead({ head, times, openLine }) {
    if (head === null) return html`<section class="head"><p>Loading what holds the run…</p></section>`;
    if (head.missing) return html`<section class="head" data-holds-loaded><p>The events system has no run ${CONFIG.runId}.</p></section>`;
    return html`<section class="head" aria-labelledby="head-title" data-holds-loaded>
      <h2 id="head-title">Run ${head.id}: ${head.status}</h2>
      <p class="headline">${head.headline}</p>
      ${head.holds?.length
        ? html`<ul class="holds" aria-label="What holds the run">
            ${head.holds.map((hold, i) => {
              const family = HOLD_FAMILIES[hold.reason] ?? "wait";
              return html`<li class=${"hold family-" + family} key=${i} data-reason=${hold.reason}>
                <p><span class=${"kind family-" + family}><span aria-hidden="true">${FAMILIES[family].icon}</span> ${hold.reason}</span>${" "}
                  <span class="sentence">${hold.sentence}</span></p>
                <p class="when">since ${formatTime(hold.since, times)}, <${HeldFor} since=${hold.since} skew=${head.skew} />${hold.phase != null ? ` · phase ${hold.phase}` : ""}${hold.stepId ? ` · step ${hold.stepId}` : ""}${hold.certain === false ? " · the log cannot tell whether it still holds" : ""}</p>
                ${hold.blockingRun
                  ? html`<p class="blocking">Blocked by <${RunLink} id=${hold.blockingRun.id}>run ${hold.blockingRun.id}</${RunLink}> (${hold.blockingRun.status}): ${hold.blockingRun.headline}</p>`
                  : null}
                ${hold.evidence?.length
                  ? html`<p class="evidence">Evidence: ${hold.evidence.map(
                      (line) => html` <a href=${runUrl(CONFIG.runId, "?line=" + encodeURIComponent(line.id))}
                        onClick=${(event) => { event.preventDefault(); openLine(line.id); }}>${line.kindName} at ${formatTime(line.at, times)}</a>`,
                    )}</p>`
                  : null}
              </li>`;
            })}
          </ul>`
        : null}
    </section>`;
  }

  // What a refused step's box says besides its status: the switch or cap to
  // change, from the server's STEP_REFUSED hold on it (whose evidence is the
  // step.refused line).
  function stepNote(step, holds) {
    if (step.status !== "refused") return null;
    const hold = (holds ?? []).find((h) => h.reason === "STEP_REFUSED" && String(h.stepId) === String(step.stepId));
    const refused = hold?.evidence?.findLast((line) => line.detail?.__typename === "StepRefusedDetail");
    return refused ? refusalWords(refused.detail) : null;
  }

  const page = CONFIG.runId === null ? RunsPage : RunView;
  render(html`<${page} />`, document.getElementById("app"));
})();
