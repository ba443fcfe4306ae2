-- event_run_log as the events system made it, before this service: what the
-- seed (eventRunLog.db.js) and the contract say of it. A TEXT detail (the
-- seed's column, 64 KiB), `at` a TIMESTAMP with milliseconds set on insert,
-- and the events system's own index on `at`, idx_evlog_at, that the seed's
-- comments name. No index of this service's.
CREATE TABLE event_run_log (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  run_id INT UNSIGNED NOT NULL,
  step_id INT UNSIGNED NULL,
  kind VARCHAR(32) NOT NULL,
  phase INT NULL,
  detail TEXT NULL,
  at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  KEY idx_evlog_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
