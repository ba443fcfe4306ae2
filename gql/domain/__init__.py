"""The run log's rules: what holds a run, its phases, writes, the live tail, retention, who may do what."""
