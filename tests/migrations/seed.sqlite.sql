-- The seed's event_run_log (seed.mariadb.sql) in SQLite's words: a TEXT
-- detail, `at` set on insert with milliseconds, and idx_evlog_at.
CREATE TABLE event_run_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL,
  step_id INTEGER NULL,
  kind VARCHAR(32) NOT NULL,
  phase INTEGER NULL,
  detail TEXT NULL,
  at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX idx_evlog_at ON event_run_log (at);
