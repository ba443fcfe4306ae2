-- The schema `python -m gql init-db` made before migrations (main at 5c8c953, before runlog_leases),
-- recorded from a fresh SQLite database; event_runs left out (the events system's).
CREATE TABLE event_run_log (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	step_id INTEGER, 
	kind VARCHAR(64) NOT NULL, 
	phase INTEGER, 
	detail TEXT, 
	at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_event_run_log_run_utc ON event_run_log (run_id, coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' THEN strftime('%Y-%m-%d %H:%M:%f', at) END, ''), id);
CREATE INDEX ix_event_run_log_run_kind_utc ON event_run_log (run_id, kind, coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' THEN strftime('%Y-%m-%d %H:%M:%f', at) END, ''), id);
CREATE TABLE event_run_log_keys (
	run_id INTEGER NOT NULL, 
	key_digest VARCHAR(64) NOT NULL, 
	line_digest VARCHAR(64) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (run_id, key_digest)
);
CREATE INDEX ix_event_run_log_keys_created ON event_run_log_keys (created_at);
