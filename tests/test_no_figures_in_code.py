"""Benchmark figures live in docs/performance.md's dated results, with how they were made; the code says why.

A speed figure in a docstring, a comment or a page of reference goes stale
silently as the code around it changes. This looks for the shapes such
figures took in gql/, pyproject.toml and docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(
    r"\d+(\.\d+)?x (less|more|the|on|faster|slower)\b"  # 1.15x less CPU
    r"|\b(timeit|alternating rounds|process_time per request|CPU per (WriteNote|request|\d))"
    r"|\d+(\.\d+)? ?(us|µs|ns) (a|of|per|less|for)\b"  # 2.5 us a write
    r"|\d+(\.\d+)? ms (of CPU|against|with|without)\b",
    re.IGNORECASE,
)
# In prose, the numbers alone: "alternating rounds" also names how a result was made.
MEASURED = re.compile(
    r"\d+(\.\d+)?(x| times) (less|more|the|faster|slower|as long)\b"
    r"|\d+(\.\d+)? ?(us|µs|ns) (a|of|per|less|for)\b"
    r"|\d+(\.\d+)? ms (of CPU|against|with|without)\b",
    re.IGNORECASE,
)
# The sections of docs/ that are dated results, where figures belong.
RESULTS = ("## What each piece bought", "## Latest results")


def test_no_benchmark_figures_in_the_code() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "gql").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FIGURE.search(line)
    ]
    assert found == [], "move these to docs/performance.md, dated, with the command:\n" + "\n".join(found)


def test_no_benchmark_figures_in_pyproject_or_the_docs_reference() -> None:
    found = []
    for path in [ROOT / "pyproject.toml", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        heading = ""
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("## "):
                heading = line
            if not heading.startswith(RESULTS) and MEASURED.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "move these to docs/performance.md's dated results:\n" + "\n".join(found)


def test_the_figures_in_docs_performance_are_dated() -> None:
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    section = page.split("## What each piece bought", 1)[1].split("\n## ", 1)[0]
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith(("| piece", "| ---"))
    ]
    assert len(rows) > 20
    undated = [row for row in rows if not re.search(r"\| 20\d\d-\d\d-\d\d, `[0-9a-f]{7}` \|", row)]
    assert undated == []


def test_the_readmes_goals_are_the_latest_results() -> None:
    """README's table of goals repeats docs/performance.md's latest run: the ratios must be the same."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    # The first table of the latest run, before its comparison with an older revision.
    latest = page.split("## Latest results", 1)[1].split("```", 2)[1].split("\nbefore = ", 1)[0]
    ratios = {}
    for line in latest.splitlines():
        found = re.match(
            r"(.+?, \d[\d,]*-line pages?, \d+ clients?|WriteNote, 8 clients|service RSS.+?)\s{2,}", line
        )
        if found:
            ratios[found.group(1)] = line[found.end() :].split()[5]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("```text\nRunLog, 2,000-line page", 1)[1].split("```", 1)[0]
    shown = dict(re.findall(r"^(.+?)\s{2,}\S+\s+([\d.]+)\s", "RunLog, 2,000-line page" + table, re.MULTILINE))
    assert shown == {
        "RunLog, 2,000-line page, 1 client": ratios["RunLog, 2,000-line page, 1 client"],
        "RunLog, 50-line pages, 8 clients": ratios["RunLog, 50-line pages, 8 clients"],
        "WriteNote, 8 clients": ratios["WriteNote, 8 clients"],
        "RSS after 10,000 mixed requests": ratios["service RSS after 10,000 mixed requests"],
    }
