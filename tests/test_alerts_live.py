"""deploy/prometheus/alerts.yml, loaded unchanged by Debian's Prometheus, alerts on a hold via Alertmanager.

A real server (`serve`), Prometheus scraping its /metrics with a reader's token, Alertmanager
routing to a webhook receiver here, as deploy/ configures them (the timings shortened, the
addresses this machine's). The binaries come from Debian's `prometheus` and
`prometheus-alertmanager` (scripts/install); without them this skips, unless
RUNLOG_TEST_REQUIRE_PROMETHEUS=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from . import local, serving
from .conftest import Backend, free_port

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
PROMETHEUS, ALERTMANAGER = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
PROMTOOL = shutil.which("promtool")  # in Debian's prometheus
REQUIRE = os.environ.get("RUNLOG_TEST_REQUIRE_PROMETHEUS") == "1"
READER = "reader-token-for-prometheus"
PUBLIC_URL = "https://runlog.example.test"
# Seconds a parked step or a failed cleanup is held before it alerts, here; a retrying step waits
# the default's hour.
PARKED_AFTER = 4
# Seconds any event here may take: each is waited for, and this is only how long before giving up.
WITHIN = 90


@pytest.fixture
def binaries() -> tuple[str, str]:
    if PROMETHEUS is None or ALERTMANAGER is None or PROMTOOL is None:
        missing = "Debian's prometheus and prometheus-alertmanager are not installed (scripts/install)"
        if REQUIRE:
            pytest.fail(f"RUNLOG_TEST_REQUIRE_PROMETHEUS=1, but {missing}")
        pytest.skip(missing)
    return PROMETHEUS, ALERTMANAGER


class Receiver:
    """A webhook receiver: each notification Alertmanager posts, with when it came (Unix time)."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self) -> list[tuple[float, dict[str, Any]]]:
        """Each alert of each notification, with when its notification came."""
        return [(at, alert) for at, body in list(self.received) for alert in body["alerts"]]

    def wait_for(self, found: Callable[[], bool], what: str, logs: Callable[[], str]) -> None:
        deadline = time.monotonic() + WITHIN
        while not found():
            assert time.monotonic() < deadline, (
                f"no {what} within {WITHIN}s; received {self.received}\n{logs()}"
            )
            time.sleep(0.2)


def _edited(path: Path, changes: dict[str, str]) -> str:
    """`path`'s text with each change made where it is, once (no YAML parser in the test's packages)."""
    text = path.read_text(encoding="utf-8")
    for old, new in changes.items():
        assert text.count(old) == 1, f"{path} no longer says {old!r} once"
        text = text.replace(old, new)
    return text


def _started(folder: Path, name: str, command: list[str]) -> subprocess.Popen[bytes]:
    with (folder / f"{name}.log").open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder)


@pytest.fixture
def stack(binaries: tuple[str, str], tables: Backend, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The server, Alertmanager and Prometheus, configured from deploy/; all stopped on the way out."""
    prometheus, alertmanager = binaries
    receiver = Receiver()
    manager_port, prometheus_port = free_port(), free_port()
    routed = _edited(
        DEPLOY / "alertmanager" / "alertmanager.yml",
        {
            "group_wait: 30s": "group_wait: 1s",
            "group_interval: 5m": "group_interval: 1s",
            "repeat_interval: 4h": "repeat_interval: 1h",
            "url: http://alert-receiver:8080/alerts": f"url: {receiver.url}",
        },
    )
    (tmp_path / "alertmanager.yml").write_text(routed)

    server = serving.start(
        tmp_path,
        tables.url,
        RUNLOG_READER_TOKEN=READER,
        RUNLOG_HOLD_ALERT_AFTER="3600",
        RUNLOG_HOLD_ALERT_AFTER_BY_REASON=f"STEP_PARKED={PARKED_AFTER},CLEANUP_FAILED={PARKED_AFTER}",
        RUNLOG_PUBLIC_URL=PUBLIC_URL,
    )
    (tmp_path / "reader-token").write_text(READER)
    scraping = _edited(
        DEPLOY / "prometheus" / "prometheus.yml",
        {
            "scrape_interval: 30s": "scrape_interval: 1s",
            "evaluation_interval: 30s": "evaluation_interval: 1s",
            "- /etc/prometheus/alerts.yml": f"- {DEPLOY / 'prometheus' / 'alerts.yml'}",  # unchanged
            '["alertmanager:9093"]': f'["127.0.0.1:{manager_port}"]',
            '["runlog:8000"]': f'["{server.base.removeprefix("http://")}"]',
            # Its reader's token, as the file's comment says to give it.
            "# authorization:": "authorization:",
            "#   type: Bearer": "  type: Bearer",
            "#   credentials_file: /etc/prometheus/runlog-reader-token": (
                f"  credentials_file: {tmp_path / 'reader-token'}"
            ),
        },
    )
    (tmp_path / "prometheus.yml").write_text(scraping)

    processes = [
        _started(
            tmp_path,
            "alertmanager",
            [
                alertmanager,
                f"--config.file={tmp_path / 'alertmanager.yml'}",
                f"--storage.path={tmp_path / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{manager_port}",
                "--cluster.listen-address=",  # one Alertmanager, no gossip port
            ],
        ),
        _started(
            tmp_path,
            "prometheus",
            [
                prometheus,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
        ),
    ]

    def logs() -> str:
        return "\n".join(
            f"── {name}:\n{(tmp_path / f'{name}.log').read_text(errors='replace')[-4000:]}"
            for name in ("serve", "prometheus", "alertmanager")
        )

    try:
        serving.wait_until_healthy(server)
        yield {"server": server, "receiver": receiver, "logs": logs, "prometheus": prometheus_port}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=serving.STOP_WITHIN)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        serving.stop(server)
        receiver.server.shutdown()
        receiver.server.server_close()


def _write(base: str, run_id: int, kind: str, step_id: int | None, detail: dict[str, Any]) -> None:
    answer = local.post(
        f"{base}/graphql",
        json={
            "query": "mutation($r: ID!, $k: String!, $s: ID, $d: JSON) "
            "{ writeRunLog(runId: $r, kind: $k, stepId: $s, phase: 1, detail: $d) }",
            "variables": {"r": str(run_id), "k": kind, "s": step_id and str(step_id), "d": detail},
        },
    ).json()
    assert answer == {"data": {"writeRunLog": True}}, answer


def _since(base: str, run_id: int) -> float:
    """The hold's start, as /metrics shows it to a reader (once a read after the line shows it)."""
    deadline = time.monotonic() + WITHIN
    pattern = re.compile(rf'^runlog_hold_since_seconds\{{[^}}]*run_id="{run_id}"[^}}]*\}} (\S+)$', re.M)
    while True:
        text = local.get(f"{base}/metrics", headers={"Authorization": f"Bearer {READER}"}).text
        found = pattern.findall(text)
        if found:
            [since] = found
            return float(since)
        assert time.monotonic() < deadline, f"/metrics shows no hold of run {run_id}:\n{text}"
        time.sleep(0.2)


def test_a_hold_alerts_once_past_its_setting_and_resolves_when_a_line_ends_it(
    stack: dict[str, Any], tables: Backend
) -> None:
    base, receiver, logs = stack["server"].base, stack["receiver"], stack["logs"]
    for run_id in (7, 8, 9):
        tables.add_run(run_id, "live", None, "2026-06-01 18:00:00")
    tables.add_run(10, "cancelled", "2026-06-01 18:00:00", "2026-06-01 18:00:00")
    _write(base, 8, "step.status", 81, {"from": "pending", "to": "running"})  # nothing holds run 8
    _write(base, 9, "step.retry", 91, {"attempt": 1, "maxAttempts": 5, "error": "timeout"})  # under its hour
    _write(base, 7, "step.parked", 71, {"waitingFor": "a GM to hand over the crown"})
    since = _since(base, 7)
    # A finished run, held by the cleanup that failed as it ended.
    failed = {"resourceIds": ["3"], "error": "a player stands in it", "leftAs": "untouched", "attempt": 1}
    _write(base, 10, "cleanup.failed", None, {"group": "moongate", **failed})

    receiver.wait_for(lambda: len(receiver.alerts()) == 2, "two notifications", logs)
    alerts = {alert["labels"]["run_id"]: (came, alert) for came, alert in receiver.alerts()}
    came, alert = alerts["7"]
    assert alert["status"] == "firing"
    # Nothing came before the hold had lasted its setting.
    assert came >= since + PARKED_AFTER
    assert {k: alert["labels"][k] for k in ("alertname", "run_id", "reason", "subject")} == {
        "alertname": "RunHeld",
        "run_id": "7",
        "reason": "STEP_PARKED",
        "subject": "step:71",
    }
    assert alert["annotations"]["sentence"] == "Step 71 waits on a human: a GM to hand over the crown."
    assert alert["annotations"]["url"] == f"{PUBLIC_URL}/runs/7"
    _, cleanup = alerts["10"]
    assert cleanup["status"] == "firing"
    assert (cleanup["labels"]["reason"], cleanup["labels"]["subject"]) == ("CLEANUP_FAILED", "group:moongate")
    assert (
        cleanup["annotations"]["sentence"]
        == "Cleanup group moongate did not come back: a player stands in it."
    )
    assert cleanup["annotations"]["url"] == f"{PUBLIC_URL}/runs/10"

    _write(base, 7, "step.status", 71, {"from": "parked", "to": "running"})
    _write(base, 10, "cleanup.reverted", None, {"group": "moongate", "resourceIds": ["3"]})
    receiver.wait_for(lambda: len(receiver.alerts()) == 4, "two resolutions", logs)
    told = sorted((a["labels"]["run_id"], a["status"], a["labels"]["subject"]) for _, a in receiver.alerts())
    assert told == [
        ("10", "firing", "group:moongate"),
        ("10", "resolved", "group:moongate"),
        ("7", "firing", "step:71"),
        ("7", "resolved", "step:71"),
    ]


def test_the_rules_alert_once_per_hold_past_its_reason_s_threshold_and_on_what_would_silence_them(
    binaries: tuple[str, str],
) -> None:
    """promtool's unit tests (tests/prometheus/alerts_test.yml) of the rules file as it is."""
    assert PROMTOOL is not None
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"],
        cwd=ROOT / "tests" / "prometheus",
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
