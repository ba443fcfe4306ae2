"""The benchmarks' report: each case's figures and their tables (`Report`), how long
cases run (`Plan`), and `say` for progress.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from .revision import Revision
from .servers import BEFORE, TARGETS

NOISE = 0.05  # how far a ratio moves between runs (issue 20): a change worse than this is flagged


# ── the report ───────────────────────────────────────────────────────────────


@dataclass
class Report:
    targets: tuple[str, ...] = TARGETS
    against: Revision | None = None  # with --against: the revision served as `before`
    rows: list[tuple[str, ...]] = field(default_factory=list)
    changes: list[tuple[str, ...]] = field(default_factory=list)  # with --against: before and now
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(
        self,
        case: str,
        unit: str,
        figures: dict[str, float],
        ratio: float,
        goal: str,
        note: str = "",
        before: float | None = None,
        why_not_before: str | None = None,
    ) -> None:
        """A row: the figure of each server, the service's ratio to the floor, and the goal's verdict.

        `before` is the same ratio for the revision given to --against, when it was measured;
        `why_not_before` says why it was not, when it is known.
        """
        if not goal or goal.startswith("("):  # shown, not judged: "(shown)", or what it is, "(per line)"
            verdict = goal or "(shown)"
        else:
            verdict = f"{goal} {'met' if _meets(ratio, goal) else 'NOT met'}"
        cells = [f"{figures[t]:,.1f}" if t in figures else "-" for t in self.targets]
        self.rows.append((case, unit, *cells, f"{ratio:.3f}", verdict, note))
        if self.against is None:
            return
        if before is None:
            why = f": {why_not_before}" if why_not_before else ""
            self.changes.append((case, "-", f"{ratio:.3f}", "-", f"not measured at the revision{why}"))
            return
        now_over = ratio / before
        # Ratios of requests a second are better higher; of times and memory, lower.
        better = now_over > 1 if unit == "req/s" else now_over < 1
        moved = abs(now_over - 1)
        if moved < 0.0005:
            change = "same"
        else:
            change = f"{moved:.1%} {'better' if better else 'worse'}"
            if not better and moved > NOISE:
                change += f" (more than {NOISE:.0%})"
        self.changes.append((case, f"{before:.3f}", f"{ratio:.3f}", f"{now_over:.3f}", change))

    def unmeasured(self, case: str, goal: str, why: str) -> None:
        self.rows.append((case, "", *("-" for _ in self.targets), "-", f"{goal} NOT measured", why))
        if self.against is not None:
            self.changes.append((case, "-", "-", "-", f"NOT measured: {why}"))

    def print(self) -> None:
        head = ("case", "unit", *self.targets, "ratio", "goal", "")
        _table(head, self.rows)
        if self.against is not None:
            print()
            print(f"{BEFORE} = {self.against.label}; now = this tree, as it is on disk")
            _table(("case", f"{BEFORE} ratio", "now ratio", "now/before", "change"), self.changes)
        for note in self.notes:
            print(note)
        for problem in self.failed:
            print(f"!! {problem}")


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _meets(ratio: float, goal: str) -> bool:
    op, _, value = goal.partition(" ")
    return ratio <= float(value) if op == "<=" else ratio >= float(value)


_STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - _STARTED:5.0f}s] {text}", file=sys.stderr, flush=True)


@dataclass
class Plan:
    """How long each case runs."""

    latency_rounds: int
    latency_count: int  # requests per server per round
    rate_rounds: int
    rate_seconds: float  # per server per round
