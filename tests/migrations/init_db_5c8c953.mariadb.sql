-- The schema `python -m gql init-db` made before migrations (main at 5c8c953, before runlog_leases),
-- recorded with SHOW CREATE TABLE from a fresh MariaDB database; event_runs
-- left out (the events system's).
CREATE TABLE `event_run_log` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `run_id` int(11) NOT NULL,
  `step_id` int(11) DEFAULT NULL,
  `kind` varchar(64) NOT NULL,
  `phase` int(11) DEFAULT NULL,
  `detail` mediumtext DEFAULT NULL,
  `at` datetime(3) NOT NULL,
  PRIMARY KEY (`id`),
  KEY `ix_event_run_log_run_at` (`run_id`,`at`,`id`),
  KEY `ix_event_run_log_run_kind_at` (`run_id`,`kind`,`at`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
CREATE TABLE `event_run_log_keys` (
  `run_id` int(11) NOT NULL,
  `key_digest` varchar(64) NOT NULL,
  `line_digest` varchar(64) NOT NULL,
  `created_at` datetime(3) NOT NULL,
  PRIMARY KEY (`run_id`,`key_digest`),
  KEY `ix_event_run_log_keys_created` (`created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
