#!/usr/bin/env bash
# RSS of `python -m gql serve` while GET /runs/1/log.ndjson streams 1,000,000 lines (MariaDB).
set -euo pipefail
db=rss_export
mariadb -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
url=mysql+aiomysql://root@127.0.0.1:3306/$db
root=$(cd "$(dirname "$0")/.." && pwd)
cd /tmp
RUNLOG_DATABASE_URL=$url "$root"/.venv/bin/python -m gql init-db >/dev/null
mariadb -uroot -h127.0.0.1 $db -e "INSERT INTO event_runs (id, status, updated_at) VALUES (1, 'running', NOW());
INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at)
  SELECT 1, seq % 40, IF(seq % 3 = 0, 'note', 'step.status'), seq % 5,
         IF(seq % 3 = 0, CONCAT('{\"text\":\"line ', seq, '\"}'), '{\"from\":\"running\",\"to\":\"done\"}'),
         TIMESTAMP('2026-11-01') + INTERVAL seq * 2 SECOND FROM seq_1_to_1000000;"
RUNLOG_DATABASE_URL=$url "$root"/.venv/bin/python -m gql serve --port 8791 >/tmp/rss-serve.log 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf localhost:8791/healthz >/dev/null && break; sleep 0.2; done
rss() { awk '/VmRSS/ {print $2}' /proc/$pid/status; }
echo "RSS before: $(rss) kB"
( while kill -0 $pid 2>/dev/null; do rss; sleep 0.5; done ) > /tmp/rss-samples &
sampler=$!
start=$(date +%s.%N)
lines=$(curl -sf localhost:8791/runs/1/log.ndjson | wc -l)
end=$(date +%s.%N)
kill $sampler; kill $pid; wait $pid 2>/dev/null || true
echo "lines exported: $lines in $(echo "$end - $start" | bc) s"
echo "RSS during the export, kB: min $(sort -n /tmp/rss-samples | head -1), max $(sort -n /tmp/rss-samples | tail -1), samples $(wc -l < /tmp/rss-samples)"
mariadb -uroot -h127.0.0.1 -e "DROP DATABASE $db"
