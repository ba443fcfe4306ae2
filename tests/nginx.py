"""deploy/nginx/runlog.conf in Debian's nginx, in front of a test's server: started, waited for, stopped.

The file runs as it is but for two strings, each found exactly once: the upstream's address
(`runlog:8000`, the compose service's) and the `listen` port. nginx runs as the test's user in
one process (`master_process off`), its pid, logs and temporary files in the test's folder.
Without nginx the tests skip, unless RUNLOG_TEST_REQUIRE_PROXY=1 (CI: scripts/install installs it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import free_port, wait_until_answered

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "deploy" / "nginx" / "runlog.conf"
UPSTREAM = "server runlog:8000;"
LISTEN = "listen 8080;"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
REQUIRE = os.environ.get("RUNLOG_TEST_REQUIRE_PROXY") == "1"
# Seconds nginx has to answer once started.
START_WITHIN = 30

MAIN = """\
daemon off;
master_process off;
pid {folder}/nginx.pid;
error_log {folder}/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    include {folder}/runlog.conf;
}}
"""


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    base: str  # http://127.0.0.1:<port>
    port: int
    folder: Path

    def errors(self) -> str:
        """nginx's error log: why it refused or dropped a client."""
        log = self.folder / "error.log"
        return log.read_text() if log.exists() else ""


def binary() -> str:
    if NGINX is None:
        missing = "Debian's nginx is not installed (scripts/install installs nginx-light)"
        if REQUIRE:
            pytest.fail(f"RUNLOG_TEST_REQUIRE_PROXY=1, but {missing}")
        pytest.skip(missing)
    return NGINX


def configured(upstream_port: int, port: int) -> str:
    """deploy/nginx/runlog.conf with this machine's addresses: the only two changes made to it."""
    text = CONF.read_text()
    for placeholder in (UPSTREAM, LISTEN):
        assert text.count(placeholder) == 1, f"{CONF} must say {placeholder!r} once"
    return text.replace(UPSTREAM, f"server 127.0.0.1:{upstream_port};").replace(
        LISTEN, f"listen 127.0.0.1:{port};"
    )


@contextmanager
def proxying(folder: Path, upstream: str) -> Iterator[Proxy]:
    """nginx with deploy/nginx/runlog.conf in front of `upstream` (http://127.0.0.1:<port>), answering."""
    nginx = binary()
    folder = folder / "nginx"
    folder.mkdir()
    port = free_port()
    (folder / "runlog.conf").write_text(configured(int(upstream.rsplit(":", 1)[1]), port))
    (folder / "nginx.conf").write_text(MAIN.format(folder=folder))
    command = [nginx, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(folder / "nginx.conf")]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    with (folder / "output.log").open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    proxy = Proxy(process, f"http://127.0.0.1:{port}", port, folder)
    try:
        wait_until_answered(f"{proxy.base}/livez", process, proxy.errors, START_WITHIN)
        yield proxy
    finally:
        process.send_signal(signal.SIGTERM)  # nginx's fast stop: connections closed at once
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
