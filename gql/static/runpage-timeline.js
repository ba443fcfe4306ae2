// The run page's times and its timeline, loaded before runpage.js, which
// takes them from `window.runpageTimeline`: times as UTC or local, how long
// something has lasted in words, a clock that ticks, and the run's phases and
// steps, under the Gantt chart of `Run.timeline` (a row per phase and per
// step, a bar per state) drawn as plain SVG. Spans still open (`until` null) end at the server's now and grow
// as the clock ticks; the page asks the timeline again when lines arrive.
"use strict";

window.runpageTimeline = (function () {
  const { h } = preact;
  const { useState, useEffect, useRef } = preactHooks;
  const html = htm.bind(h);
  const TIMES_KEY = "runlog:times";

  // ── times ────────────────────────────────────────────────────────────────

  function useTimes() {
    const [times, setTimes] = useState(window.localStorage.getItem(TIMES_KEY) === "local" ? "local" : "utc");
    const choose = (value) => {
      window.localStorage.setItem(TIMES_KEY, value);
      setTimes(value);
    };
    return [times, choose];
  }

  function pad(n, width = 2) {
    return String(n).padStart(width, "0");
  }

  // The date's parts in the zone chosen: [year, month, day, hours, minutes, seconds, ms].
  function parts(date, times) {
    return times === "utc"
      ? [date.getUTCFullYear(), date.getUTCMonth() + 1, date.getUTCDate(), date.getUTCHours(), date.getUTCMinutes(), date.getUTCSeconds(), date.getUTCMilliseconds()]
      : [date.getFullYear(), date.getMonth() + 1, date.getDate(), date.getHours(), date.getMinutes(), date.getSeconds(), date.getMilliseconds()];
  }

  function zone(date, times) {
    if (times === "utc") return "UTC";
    const offset = -date.getTimezoneOffset();
    return `${offset >= 0 ? "+" : "-"}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
  }

  function formatTime(iso, times) {
    if (!iso) return "—";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    const [y, mo, d, hh, mi, s, ms] = parts(date, times);
    return `${y}-${pad(mo)}-${pad(d)} ${pad(hh)}:${pad(mi)}:${pad(s)}.${pad(ms, 3)} ${zone(date, times)}`;
  }

  // A time of day, for the chart's axis: `05:20`, or `05:20:15` where seconds tell ticks apart.
  function clockTime(ms, times, seconds) {
    const [, , , hh, mi, s] = parts(new Date(ms), times);
    return `${pad(hh)}:${pad(mi)}${seconds ? ":" + pad(s) : ""}`;
  }

  // How long, in words: `40 s`, `12 min`, `2 h 5 min`, `3 d 4 h`.
  function lasted(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    const m = Math.floor(s / 60);
    const hours = Math.floor(m / 60);
    const days = Math.floor(hours / 24);
    if (s < 60) return `${s} s`;
    if (m < 60) return `${m} min`;
    if (hours < 24) return `${hours} h${m % 60 ? ` ${m % 60} min` : ""}`;
    return `${days} d${hours % 24 ? ` ${hours % 24} h` : ""}`;
  }

  // The server's clock less the browser's, in ms, from a hold's `since` and
  // `heldForSeconds` (0 without a hold): open spans and holds last until the
  // server's now, not until a browser clock that is set wrong.
  function skewOf(run) {
    const hold = run?.holds?.[0];
    if (!hold || hold.heldForSeconds == null) return 0;
    return Date.parse(hold.since) + hold.heldForSeconds * 1000 - Date.now();
  }

  // The server's now (ms), again every `period` ms (never, for 0).
  function useNow(period, skew = 0) {
    const [now, setNow] = useState(() => Date.now() + skew);
    useEffect(() => {
      setNow(Date.now() + skew);
      if (!period) return undefined;
      const timer = window.setInterval(() => setNow(Date.now() + skew), period);
      return () => window.clearInterval(timer);
    }, [period, skew]);
    return now;
  }

  // How long a hold has lasted, as of now: "for 12 min", ticking.
  function HeldFor({ since, skew }) {
    const started = Date.parse(since);
    const [period, setPeriod] = useState(1000);
    const now = useNow(period, skew);
    const seconds = (now - started) / 1000;
    // Seconds are shown for the first minute only; then a tick every 10 s is soon enough.
    useEffect(() => setPeriod(seconds < 60 ? 1000 : 10000), [seconds >= 60]);
    return html`<span class="held-for">for ${lasted(seconds)}</span>`;
  }

  // ── the Gantt chart ─────────────────────────────────────────────────────

  const LABEL = 120; // px: the rows' names
  const ROW = 24; // px: one row
  const AXIS = 22; // px: the time axis on top
  const CHAR = 7; // px: about one character of the chart's 12px text
  const TICKS = [1, 5, 15, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((s) => s * 1000);
  // A state's family: its colour here, as the kinds' in the table.
  const FAMILY_OF_STATE = { parked: "wait", refused: "refusal", retrying: "failure", failed: "failure", done: "progress", completed: "progress" };
  // A step's statuses after which it does no more: its open span is a mark where it ended, not a bar that grows.
  const ENDED = new Set(["done", "failed", "skipped", "cancelled", "completed"]);

  // The chart's rows, phases by number: each phase's own row, then a row per
  // step, under the phase of the step's first span, steps in the order they began.
  function rowsOf(timeline) {
    const groups = new Map();
    const group = (phase) => {
      if (!groups.has(phase)) groups.set(phase, { phase, spans: [], steps: new Map() });
      return groups.get(phase);
    };
    for (const span of timeline) {
      if (span.stepId == null) {
        group(span.phase).spans.push(span);
        continue;
      }
      const id = String(span.stepId);
      const home = [...groups.values()].find((g) => g.steps.has(id)) ?? group(span.phase);
      if (!home.steps.has(id)) home.steps.set(id, []);
      home.steps.get(id).push(span);
    }
    return [...groups.values()]
      .sort((a, b) => (a.phase ?? Infinity) - (b.phase ?? Infinity))
      .flatMap((g) => {
        const done = g.spans.some((span) => span.until !== null);
        return [
          { key: "phase " + g.phase, label: g.phase == null ? "no phase" : `Phase ${g.phase}`, spans: g.spans, phase: true },
          ...[...g.steps].map(([id, spans]) => ({ key: "step " + id, label: `step ${id}`, spans, done })),
        ];
      });
  }

  // A tick a round time apart, about every 110 px.
  function tickEvery(range, plot) {
    return TICKS.find((step) => (step / range) * plot >= 110) ?? TICKS[TICKS.length - 1];
  }

  // The chart: `timeline` as the server gives it; open spans end at the
  // server's now (`skew`), or at the run's last line once the run has ended.
  function Gantt({ timeline, times, skew, terminal, lastLineAt }) {
    const box = useRef(null);
    const [width, setWidth] = useState(900);
    useEffect(() => {
      const observer = new ResizeObserver(([entry]) => setWidth(Math.max(400, Math.floor(entry.contentRect.width))));
      observer.observe(box.current);
      return () => observer.disconnect();
    }, []);
    const plot = width - LABEL - 8;
    const starts = timeline.map((span) => Date.parse(span.from));
    const first = Math.min(...starts);
    const open = !terminal && timeline.some((span) => span.until === null);
    const lastEnd = Math.max(...starts, ...timeline.map((span) => (span.until ? Date.parse(span.until) : -Infinity)), lastLineAt ? Date.parse(lastLineAt) : -Infinity);
    // The clock ticks about once a pixel's worth of time, at most once a second.
    const [period, setPeriod] = useState(1000);
    const now = useNow(open ? period : 0, skew);
    const end = Math.max(first + 1000, open ? Math.max(now, lastEnd) : lastEnd);
    useEffect(() => setPeriod(Math.min(60000, Math.max(1000, Math.round((end - first) / plot)))), [Math.round((end - first) / plot / 1000), open]);
    const x = (ms) => LABEL + ((ms - first) / (end - first)) * plot;
    const rows = rowsOf(timeline);
    const step = tickEvery(end - first, plot);
    const ticks = [];
    for (let t = Math.ceil(first / step) * step; t <= end; t += step) ticks.push(t);
    const height = AXIS + rows.length * ROW;
    const seen = (ms) => formatTime(new Date(ms).toISOString(), times);

    const bar = (row, span, y) => {
      const from = Date.parse(span.from);
      const growing = span.until === null && !terminal;
      const ended = span.until === null && !row.phase && (ENDED.has(span.state) || row.done);
      const until = span.until ? Date.parse(span.until) : Math.max(from, growing ? now : lastEnd);
      const family = FAMILY_OF_STATE[span.state] ?? "active";
      const title = `${row.label}: ${span.state} from ${seen(from)}${span.until ? ` until ${seen(until)}` : growing && !ended ? ", still" : ""}` +
        (ended ? "" : ` (${lasted((until - from) / 1000)})`);
      const attrs = { "data-span": "", "data-phase": span.phase ?? "", "data-step": span.stepId ?? "", "data-state": span.state, "data-open": span.until === null ? "true" : "false" };
      if (ended) {
        // Where the step ended: a mark and its word, not a bar growing on.
        const left = x(from);
        return html`<g ...${attrs} class=${"span ended family-" + family} key=${span.from}>
          <title>${title}</title>
          <path d=${`M${left} ${y + 4} l6 ${ROW / 2 - 6} l-6 ${ROW / 2 - 6} l-6 ${6 - ROW / 2} z`} />
          <text x=${left + 9} y=${y + ROW / 2 + 4}>${span.state}</text>
        </g>`;
      }
      const left = x(from);
      const wide = Math.max(2, x(until) - left);
      return html`<g ...${attrs} class=${"span family-" + family + (growing ? " growing" : "")} key=${span.from}>
        <title>${title}</title>
        <rect x=${left} y=${y + 3} width=${wide} height=${ROW - 6} rx="2" />
        ${growing ? html`<rect class="end" x=${left + wide - 3} y=${y + 3} width="3" height=${ROW - 6} />` : null}
        ${wide > span.state.length * CHAR + 8 ? html`<text x=${left + 4} y=${y + ROW / 2 + 4}>${span.state}</text>` : null}
      </g>`;
    };

    const label = `Timeline of ${rows.filter((row) => row.phase).length} phases and ${rows.filter((row) => !row.phase).length} steps, ` +
      `from ${seen(first)} to ${open ? "now" : seen(end)}.`;
    return html`<figure class="gantt" ref=${box}>
      <figcaption>From ${seen(first)} to ${open ? html`now (${seen(now)})` : seen(end)}; a bar per state, the open ones growing.</figcaption>
      <div class="gantt-scroll">
        <svg width=${width} height=${height} role="img" aria-label=${label} data-spans=${timeline.length}>
          <g class="axis">
            ${ticks.map((t) => html`<g key=${t}>
              <line x1=${x(t)} x2=${x(t)} y1=${AXIS - 4} y2=${height} />
              <text x=${x(t)} y=${AXIS - 8} text-anchor="middle">${clockTime(t, times, step < 60000)}</text>
            </g>`)}
          </g>
          ${rows.map((row, i) => {
            const y = AXIS + i * ROW;
            return html`<g class=${row.phase ? "row phase-row" : "row"} key=${row.key}>
              <text class="label" x="4" y=${y + ROW / 2 + 4}>${row.label}</text>
              ${row.spans.map((span) => bar(row, span, y))}
            </g>`;
          })}
          ${open ? html`<line class="now" x1=${x(now)} x2=${x(now)} y1=${AXIS - 4} y2=${height} />` : null}
        </svg>
      </div>
    </figure>`;
  }

  // ── the phases and their steps ──────────────────────────────────────────

  // The run's phases and steps: the Gantt chart of its timeline, then each
  // phase's moments (entered, gated, advanced, completed) in the order they
  // happened and each step's latest status, with `noteOf(step)` under it. A
  // step is a button that filters the table by it (`toggleStep`), where the
  // server's runLog can (`canFilter`).
  function Phases({ run, times, steps, toggleStep, canFilter, noteOf }) {
    if (!run.phases.length && !run.timeline?.length) return null;
    const moments = (phase) =>
      [
        ["entered", phase.enteredAt],
        ["gated", phase.gatedAt],
        ["advanced", phase.advancedAt],
        ["completed", phase.completedAt],
      ]
        .filter(([, at]) => at)
        // Stable: two moments at the same time keep the order above.
        .sort(([, a], [, b]) => new Date(a) - new Date(b));
    return html`<section aria-labelledby="timeline-title">
      <h2 id="timeline-title">Phases and steps</h2>
      ${run.timeline?.length
        ? html`<${Gantt} timeline=${run.timeline} times=${times} skew=${run.skew} terminal=${run.terminal} lastLineAt=${run.lastLineAt} />`
        : null}
      <ol class="timeline">
        ${run.phases.map(
          (phase) => html`<li key=${phase.phase} data-phase=${phase.phase}>
            <strong>Phase ${phase.phase}</strong>
            <ol class="moments">
              ${moments(phase).map(([label, at]) => html`<li class="when" key=${label}>${label} ${formatTime(at, times)}</li>`)}
            </ol>
            <ul class="steps">
              ${phase.steps.map((step) => {
                const note = noteOf(step);
                return html`<li key=${step.stepId} data-step=${step.stepId}>
                  <button type="button" disabled=${!canFilter} aria-pressed=${steps.includes(String(step.stepId)) ? "true" : "false"}
                    onClick=${() => toggleStep(String(step.stepId))}
                    title=${"Show only the lines of step " + step.stepId}>
                    step ${step.stepId}: ${step.status ?? "no line yet"}${step.attempts > 1 ? ` (${step.attempts} attempts)` : ""}
                  </button>
                  ${note ? html`<p class="step-note">${note}</p>` : null}
                </li>`;
              })}
            </ul>
          </li>`,
        )}
      </ol>
    </section>`;
  }

  return { useTimes, formatTime, lasted, skewOf, HeldFor, Phases };
})();
