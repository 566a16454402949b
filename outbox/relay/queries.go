package relay

// queries are the relay's statements for one outbox schema.
type queries struct {
	claim, remove, bury, stats string
}

func newQueries(schema string) queries {
	ob := schema + ".outbox"
	return queries{
		// The claim: the oldest rows no other worker holds.
		claim: `SELECT id, request_id, queue, kind, payload, metadata, priority, run_at, max_attempts, dependency, concurrency_key,
  unique_key FROM ` + ob + ` ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
		// remove deletes relayed rows and returns each one's lag: from its
		// insert to now, on the database's clock.
		remove: `DELETE FROM ` + ob + ` WHERE id = ANY($1::bigint[])
  RETURNING extract(epoch FROM clock_timestamp() - created_at)::float8`,
		bury: `WITH refused AS (
  SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, code, message)
), moved AS (
  DELETE FROM ` + ob + ` o USING refused r WHERE o.id = r.id
  RETURNING o.*, r.code, r.message
)
INSERT INTO ` + schema + `.outbox_dead (id, request_id, queue, kind, payload, metadata, priority, run_at,
  max_attempts, dependency, concurrency_key, unique_key, created_at, error_code, error_message)
SELECT id, request_id, queue, kind, payload, metadata, priority, run_at,
  max_attempts, dependency, concurrency_key, unique_key, created_at, code, message FROM moved
ON CONFLICT (id) DO UPDATE SET error_code = excluded.error_code, error_message = excluded.error_message, dead_at = excluded.dead_at`,
		stats: `SELECT count(*),
  coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8,
  count(*) FILTER (WHERE created_at < clock_timestamp() - make_interval(secs => $1)),
  (SELECT count(*) FROM ` + schema + `.outbox_dead)
  FROM ` + ob,
	}
}
