# The run-log API on its embedded SQLite database, kept on a volume.
# Point RUNLOG_DATABASE_URL at MySQL/MariaDB for production.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The dependencies exactly as CI ran them (requirements.lock, hashes checked),
# then the service itself without resolving anything again.
COPY requirements.lock pyproject.toml README.md ./
COPY gql ./gql
RUN pip install --require-hashes -r requirements.lock \
 && pip install --no-deps . \
 && useradd --system --uid 10001 --home-dir /data --no-create-home runlog \
 && mkdir -p /data \
 && chown runlog:runlog /data

USER runlog
ENV RUNLOG_DATABASE_URL=sqlite+aiosqlite:////data/runlog.db
VOLUME ["/data"]
EXPOSE 8000

# Liveness: /livez answers while the server runs, without asking the database,
# so a database outage never marks the container unhealthy (and restarted).
# Load balancers ask /readyz instead (docs/operating.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/livez', timeout=4)"]

# Exec form: the server is PID 1 and receives SIGTERM itself, for a graceful stop.
# The same `serve` as scripts/serve, so the same uvicorn configuration
# (gql/edge/server.py): workers from RUNLOG_WORKERS, proxies trusted from
# RUNLOG_FORWARDED_ALLOW_IPS, the timeouts from their settings. Run it behind a
# reverse proxy (deploy/nginx/runlog.conf; compose.yaml puts nginx in front).
CMD ["python", "-m", "gql", "serve", "--host", "0.0.0.0", "--port", "8000"]
