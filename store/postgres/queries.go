package postgres

// The engine's SQL, one named query per statement. Every query is filtered
// by tenant (Prune alone works across tenants). $now parameters are passed
// either as coalesce($n::timestamptz, now()) or as the instant the
// transaction resolved with txNow; both mean "the caller's Now, else the
// database clock".

const (
	qNow    = `SELECT now()`
	qNowOr  = `SELECT coalesce($1::timestamptz, now())`
	qNotify = `SELECT pg_notify($1, $2)`
	// qNotifyIfQueued notifies only when one of the jobs $4 is still
	// QUEUED (a create's handoff claim did not lease them all).
	qNotifyIfQueued    = `SELECT pg_notify($1, $2) FROM jobs WHERE tenant = $3 AND id = ANY($4::text[]) AND state = 'queued' LIMIT 1`
	qSavepointHandoff  = `SAVEPOINT handoff`
	qRollbackToHandoff = `ROLLBACK TO SAVEPOINT handoff`
	qCurrentSchema     = `SELECT coalesce(current_schema(), '')`

	// jobColumns is the column list scanJob reads.
	jobColumns = `tenant, id, queue, kind, payload, metadata::text, priority, state,
	attempts, max_attempts, lease_owner, lease_generation, lease_expires_at,
	cancel_requested, cancel_reason, created_at, available_at, finished_at,
	retry_deadline, last_error_code, last_error_message, last_error_retryable,
	result, replay_of, replayed_as, abandoned, dependency, last_event_seq, leased_at, concurrency_key`

	// jobColumnsJ is jobColumns qualified by the alias j, for statements
	// that join jobs with rows of the same column names.
	jobColumnsJ = `j.tenant, j.id, j.queue, j.kind, j.payload, j.metadata::text, j.priority, j.state,
	j.attempts, j.max_attempts, j.lease_owner, j.lease_generation, j.lease_expires_at,
	j.cancel_requested, j.cancel_reason, j.created_at, j.available_at, j.finished_at,
	j.retry_deadline, j.last_error_code, j.last_error_message, j.last_error_retryable,
	j.result, j.replay_of, j.replayed_as, j.abandoned, j.dependency, j.last_event_seq, j.leased_at, j.concurrency_key`

	// jobColumnsBasic is jobColumns without the payload and the result
	// (NULL in their places, so scanJob reads either): a BASIC list
	// never reads them off the disk.
	jobColumnsBasic = `tenant, id, queue, kind, NULL::bytea, metadata::text, priority, state,
	attempts, max_attempts, lease_owner, lease_generation, lease_expires_at,
	cancel_requested, cancel_reason, created_at, available_at, finished_at,
	retry_deadline, last_error_code, last_error_message, last_error_retryable,
	NULL::bytea, replay_of, replayed_as, abandoned, dependency, last_event_seq, leased_at, concurrency_key`

	checkpointColumns = `id, job_id, phase, state, generation, parent_id, created_at`

	// checkpointColumnsBasic is checkpointColumns without the state.
	checkpointColumnsBasic = `id, job_id, phase, NULL::bytea, generation, parent_id, created_at`

	effectColumns = `job_id, effect_key, status, generation, provider_operation_id, result, created_at, updated_at`

	attemptColumns = `job_id, attempt, generation, worker_id, claimed_at, finished_at, outcome,
	error_code, error_message, error_retryable`

	policyColumns = `queue, max_attempts, initial_delay_ns, max_delay_ns, multiplier, jitter_fraction,
	retryable_codes, non_retryable_codes, total_retry_deadline_ns, default_lease_ns,
	concurrency_limit, paused, max_lease_ns, limits`
)

// Jobs and events.
const (
	qGetJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = $1 AND id = $2`

	qLockJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = $1 AND id = $2 FOR UPDATE`

	qJobExists = `SELECT true FROM jobs WHERE tenant = $1 AND id = $2`

	// qInsertJob inserts a QUEUED job whose first event (sequence 1) the
	// same transaction inserts.
	qInsertJob = `INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, replay_of, dependency, last_event_seq, concurrency_key)
	VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, 'queued', $8, $9, $10, $11, $12, $13, 1, $14)
	RETURNING ` + jobColumns

	// qBumpEventSeq reserves the next event sequence of a job. The row lock
	// it takes serialises appends, so sequences are unique and gapless.
	qBumpEventSeq = `UPDATE jobs SET last_event_seq = last_event_seq + $3
	WHERE tenant = $1 AND id = $2 RETURNING last_event_seq`

	qInsertEvent = `INSERT INTO job_events (tenant, job_id, seq, type, at, data)
	VALUES ($1, $2, $3, $4, $5, $6::jsonb)`

	// qListJobs pages jobs newest first; $6/$7 is the cursor (created_at,
	// id) of the last row of the previous page, or NULL.
	qListJobs      = `SELECT ` + jobColumns + qListJobsFrom
	qListJobsBasic = `SELECT ` + jobColumnsBasic + qListJobsFrom
	qListJobsFrom  = qListJobsWhere + qListJobsOrder
	// qListJobsWhere and qListJobsOrder are qListJobsFrom's halves: a
	// filtered list puts its filter (filterSQL, from $8) between them.
	qListJobsWhere = ` FROM jobs j
	WHERE tenant = $1
	  AND ($2 = '' OR queue = $2)
	  AND ($3 = '' OR kind = $3)
	  AND (cardinality($4::text[]) = 0 OR state = ANY($4::text[]))
	  AND ($5::timestamptz IS NULL OR (created_at, id) < ($5::timestamptz, $6::text))`
	qListJobsOrder = `
	ORDER BY created_at DESC, id DESC
	LIMIT $7`

	// qCountJobs counts the jobs of tenant $1 that match a filter (from
	// $3), up to $2 of them (NULL: all).
	qCountJobs = `SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.tenant = $1 AND %s LIMIT $2) m`
	// qSampleJobs reads the newest $2 jobs of tenant $1 that match a
	// filter (from $3).
	qSampleJobs = `SELECT ` + jobColumnsBasic + ` FROM jobs j WHERE j.tenant = $1 AND %s
	ORDER BY created_at DESC, id DESC LIMIT $2`
)

// Watch presence (migration 008): change notifications are sent while a
// row is unexpired.
const (
	qAnnounceWatchers = `INSERT INTO watch_presence (coordinator_id, until) VALUES ($1, now() + $2::interval)
	ON CONFLICT (coordinator_id) DO UPDATE SET until = excluded.until`

	qWithdrawWatchers = `DELETE FROM watch_presence WHERE coordinator_id = $1`
)

// Idempotency.
const (
	// qRetargetIdempotencyKey gives a live record whose job is gone to a
	// new job: such a record counts as expired.
	qRetargetIdempotencyKey = `UPDATE idempotency_keys SET fingerprint = $3, job_id = $4, expires_at = $5
	WHERE tenant = $1 AND operation = 'create_job' AND key = $2`
)

// Claim and expiry.
const (
	// qAdvisoryLockQueue serialises claims on one (tenant, queue) with a
	// concurrency limit until the transaction ends. The two-key form keeps
	// these locks apart from goose's single-key migration lock.
	qAdvisoryLockQueue = `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`

	// qActiveLeases counts the unexpired leases of the queues at $3 (NULL:
	// the database clock).
	qActiveLeases = `SELECT queue, count(*) FROM jobs
	WHERE state = 'leased' AND tenant = $1 AND queue = ANY($2::text[])
	  AND lease_expires_at > coalesce($3::timestamptz, now())
	GROUP BY queue`

	// qActiveKeyLeases counts the unexpired leases of the queues at $3 by
	// concurrency key.
	qActiveKeyLeases = `SELECT queue, concurrency_key, count(*) FROM jobs
	WHERE state = 'leased' AND tenant = $1 AND queue = ANY($2::text[])
	  AND lease_expires_at > coalesce($3::timestamptz, now()) AND concurrency_key <> ''
	GROUP BY queue, concurrency_key`

	// qRateStarts reads the starts of each queue's current rate window
	// ($2 queues, $3 their window starts), by key.
	qRateStarts = `SELECT r.queue, r.key, r.starts FROM rate_windows r
	JOIN unnest($2::text[], $3::timestamptz[]) AS u(q, w) ON r.queue = u.q AND r.window_start = u.w
	WHERE r.tenant = $1`

	// qAddRateStarts adds ($2 queues, $3 windows, $4 keys, $5 counts) to
	// the rate windows; qDropRateWindows deletes the queues' windows
	// before their current one.
	qAddRateStarts = `INSERT INTO rate_windows (tenant, queue, window_start, key, starts)
	SELECT $1, u.q, u.w, u.k, u.n FROM unnest($2::text[], $3::timestamptz[], $4::text[], $5::bigint[]) AS u(q, w, k, n)
	ON CONFLICT (tenant, queue, window_start, key) DO UPDATE SET starts = rate_windows.starts + excluded.starts`
	qDropRateWindows = `DELETE FROM rate_windows r USING unnest($2::text[], $3::timestamptz[]) AS u(q, w)
	WHERE r.tenant = $1 AND r.queue = u.q AND r.window_start < u.w`

	// claimLease is the end both claim statements share: the k-th picked
	// job goes to slot k, leased at $8 (NULL: the database clock) for the
	// slot's lease (0: the queue's default) capped at the queue's maximum;
	// $1 is the tenant. It names jobs_live, whose rows a claim never moves
	// (migration 014). The LEASED event is derived from the row
	// (leased_seq, leased_until: store.DeriveEvents), not inserted.
	claimLease = `
		UPDATE jobs_live j
		SET state = 'leased',
		    lease_owner = s.owner,
		    lease_generation = j.lease_generation + 1,
		    attempts = j.attempts + 1,
		    leased_at = coalesce($8::timestamptz, now()),
		    lease_expires_at = coalesce($8::timestamptz, now())
		        + (least(coalesce(nullif(s.lease_ns, 0), p.default_ns), p.max_ns) / 1000) * interval '1 microsecond',
		    leased_until = coalesce($8::timestamptz, now())
		        + (least(coalesce(nullif(s.lease_ns, 0), p.default_ns), p.max_ns) / 1000) * interval '1 microsecond',
		    leased_seq = j.last_event_seq + 1,
		    events_stored_through = least(j.events_stored_through, j.last_event_seq),
		    last_event_seq = j.last_event_seq + 1
		FROM picked p JOIN slots s ON s.rn = p.rn
		WHERE j.tenant = $1 AND j.id = p.id
		RETURNING j.*
	)
`

	// qClaimMany selects and leases in one statement, and records the
	// LEASED events. For every queue ($2 names, $3 how many jobs it may
	// still take, $4 its default and $5 its maximum lease in nanoseconds)
	// it walks the claim index (queued, available, not cancel-requested)
	// in order, LIMIT-bounded, so a claim is O(log n) per queue however
	// large the table; rows another claimer holds are skipped. The
	// candidates are merged in claim order (priority desc, available_at,
	// id), each queue capped at its share, and cut to $9 jobs, leased to
	// the slots ($6 owners, $7 asked leases) by claimLease. With $10
	// empty, jobs whose dependency's breaker is not closed are skipped
	// (the breakers are read once per statement, through their partial
	// index, and cost nothing while all are closed); with $10 set, only
	// that dependency's jobs are taken, as half-open probes. A queue whose
	// concurrency keys are limited ($12 the room of a key, -1 when keys
	// are not limited; $13-$15 the room left to keys that have leases or
	// starts) walks $11 candidates and keeps, per key, only as many as
	// the key's room, before its cap applies (store.DecideQueueRoom).
	qClaimMany = `WITH q AS (
		SELECT * FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[], $11::int[], $12::int[])
			AS q(queue, cap, default_ns, max_ns, fetch_n, key_room)
	), rooms AS (
		SELECT * FROM unnest($13::text[], $14::text[], $15::int[]) AS r(queue, key, room)
	), slots AS (
		SELECT * FROM unnest($6::text[], $7::bigint[]) WITH ORDINALITY AS s(owner, lease_ns, rn)
	), candidates AS (
		SELECT c.*, q.cap, q.default_ns, q.max_ns, q.key_room FROM q CROSS JOIN LATERAL (
			SELECT j.id, j.queue, j.priority, j.available_at, j.concurrency_key
			FROM jobs j
			WHERE j.tenant = $1 AND j.queue = q.queue AND j.state = 'queued'
			  AND j.available_at <= coalesce($8::timestamptz, now()) AND NOT j.cancel_requested
			  AND CASE WHEN $10::text = ''
			      THEN j.dependency = '' OR j.dependency <> ALL (ARRAY(SELECT b.dependency FROM breakers b WHERE b.tenant = $1 AND b.state <> 'closed'))
			      ELSE j.dependency = $10 END
			ORDER BY j.priority DESC, j.available_at, j.id
			LIMIT q.fetch_n
			FOR UPDATE SKIP LOCKED
		) c
	), allowed AS (
		SELECT k.* FROM (
			SELECT candidates.*, row_number() OVER (
				PARTITION BY queue, concurrency_key ORDER BY priority DESC, available_at, id) AS krn
			FROM candidates
		) k LEFT JOIN rooms r ON r.queue = k.queue AND r.key = k.concurrency_key
		WHERE k.key_room < 0 OR k.concurrency_key = '' OR k.krn <= coalesce(r.room, k.key_room)
	), picked AS (
		SELECT r.*, row_number() OVER (ORDER BY r.priority DESC, r.available_at, r.id) AS rn
		FROM (
			SELECT allowed.*, row_number() OVER (PARTITION BY queue ORDER BY priority DESC, available_at, id) AS qrn
			FROM allowed
		) r
		WHERE r.qrn <= r.cap
		ORDER BY r.priority DESC, r.available_at, r.id
		LIMIT $9
	), leased AS (` + claimLease + `
	SELECT ` + jobColumns + ` FROM leased`

	// qClaimPlain is qClaimMany for the common claim: no queue with
	// limited concurrency keys and no half-open probe, so each queue's
	// candidates are its cap ($3) and no key rooms are counted. The same
	// walk, order, leases and LEASED events with fewer windows to plan
	// and sort: a third less time per claim than qClaimMany, planning
	// included, measured on 50-job claims. $1-$9 are qClaimMany's.
	qClaimPlain = `WITH q AS (
		SELECT * FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[]) AS q(queue, cap, default_ns, max_ns)
	), slots AS (
		SELECT * FROM unnest($6::text[], $7::bigint[]) WITH ORDINALITY AS s(owner, lease_ns, rn)
	), candidates AS (
		SELECT c.*, q.default_ns, q.max_ns FROM q CROSS JOIN LATERAL (
			SELECT j.id, j.priority, j.available_at
			FROM jobs j
			WHERE j.tenant = $1 AND j.queue = q.queue AND j.state = 'queued'
			  AND j.available_at <= coalesce($8::timestamptz, now()) AND NOT j.cancel_requested
			  AND (j.dependency = '' OR j.dependency <> ALL (ARRAY(SELECT b.dependency FROM breakers b WHERE b.tenant = $1 AND b.state <> 'closed')))
			ORDER BY j.priority DESC, j.available_at, j.id
			LIMIT q.cap
			FOR UPDATE SKIP LOCKED
		) c
	), picked AS (
		SELECT c.*, row_number() OVER (ORDER BY c.priority DESC, c.available_at, c.id) AS rn
		FROM candidates c
		ORDER BY c.priority DESC, c.available_at, c.id
		LIMIT $9
	), leased AS (` + claimLease + `
	SELECT ` + jobColumns + ` FROM leased`

	// qLockExpired locks up to $2 leases that expired at $1 (NULL: the
	// database clock), across tenants, earliest first, skipping rows
	// another reaper holds; each row carries the instant it was judged at.
	qLockExpired = `SELECT ` + jobColumns + `, coalesce($1::timestamptz, now()), leased_until, leased_seq,
		coalesce(jsonb_array_length(attempt_log), 0) FROM jobs
	WHERE state = 'leased' AND lease_expires_at <= coalesce($1::timestamptz, now())
	ORDER BY lease_expires_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED`

	// qNextExpiry is the earliest expiry among held leases.
	qNextExpiry = `SELECT min(lease_expires_at) FROM jobs WHERE state = 'leased'`
)

// Lease-bound calls.
const (
	// qLockLease is the lease compare-and-set of every lease-bound call: it
	// locks the job only while (state = leased, owner, generation,
	// unexpired) holds, and returns the transaction's instant with it.
	qLockLease = `SELECT ` + jobColumns + `, coalesce($5::timestamptz, now()) FROM jobs
	WHERE tenant = $1 AND id = $2 AND state = 'leased' AND lease_owner = $3
	  AND lease_generation = $4 AND lease_expires_at > coalesce($5::timestamptz, now())
	FOR UPDATE`

	// qListAttempts reads a job's ended attempts and, while it is leased,
	// its running one from the job row.
	qListAttempts = `SELECT ` + attemptColumns + ` FROM job_attempts WHERE tenant = $1 AND job_id = $2
	UNION ALL
	SELECT id, attempts, lease_generation, lease_owner, leased_at, NULL, 'running', NULL, NULL, NULL
	FROM jobs WHERE tenant = $1 AND id = $2 AND state = 'leased'
	ORDER BY generation`

	qAttemptsForJobs = `SELECT ` + attemptColumns + ` FROM job_attempts
	WHERE tenant = $1 AND job_id = ANY($2::text[]) ORDER BY job_id, generation`
)

// Client cancellation.
const (
	qCancelQueued = `UPDATE jobs
	SET state = 'cancelled', finished_at = $3, cancel_requested = true, cancel_reason = $4,
	    last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = $2 AND state = 'queued'
	RETURNING ` + jobColumns

	qRequestCancelLeased = `UPDATE jobs
	SET cancel_requested = true, cancel_reason = $3, last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = $2 AND state = 'leased' AND NOT cancel_requested
	RETURNING ` + jobColumns
)

// Checkpoints.
const (
	qLatestCheckpoint = `SELECT ` + checkpointColumns + ` FROM job_checkpoints
	WHERE tenant = $1 AND job_id = $2 ORDER BY seq DESC LIMIT 1`

	qLatestCheckpoints      = `SELECT DISTINCT ON (job_id) ` + checkpointColumns + qLatestCheckpointsFrom
	qLatestCheckpointsBasic = `SELECT DISTINCT ON (job_id) ` + checkpointColumnsBasic + qLatestCheckpointsFrom
	qLatestCheckpointsFrom  = ` FROM job_checkpoints
	WHERE tenant = $1 AND job_id = ANY($2::text[]) ORDER BY job_id, seq DESC`

	// qListCheckpoints is a job's kept checkpoints, newest first.
	qListCheckpoints = `SELECT ` + checkpointColumns + ` FROM job_checkpoints
	WHERE tenant = $1 AND job_id = $2 ORDER BY seq DESC`

	qInsertCheckpoint = `INSERT INTO job_checkpoints (tenant, id, job_id, phase, state, generation, parent_id, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	RETURNING ` + checkpointColumns

	// qTrimCheckpoints keeps a job's newest $3 checkpoints.
	qTrimCheckpoints = `DELETE FROM job_checkpoints
	WHERE tenant = $1 AND job_id = $2 AND seq < (
		SELECT min(seq) FROM (
			SELECT seq FROM job_checkpoints WHERE tenant = $1 AND job_id = $2
			ORDER BY seq DESC LIMIT $3
		) newest
	)`
)

// Effect ledger.
const (
	qInsertEffect = `INSERT INTO job_effects (tenant, job_id, effect_key, status, generation, created_at, updated_at)
	VALUES ($1, $2, $3, 'reserved', $4, $5, $5)
	ON CONFLICT (tenant, job_id, effect_key) DO NOTHING
	RETURNING ` + effectColumns

	qGetEffect = `SELECT ` + effectColumns + ` FROM job_effects
	WHERE tenant = $1 AND job_id = $2 AND effect_key = $3`

	// qReReserveEffect gives a FAILED effect to the current generation.
	qReReserveEffect = `UPDATE job_effects
	SET status = 'reserved', generation = $4, provider_operation_id = '', result = NULL, updated_at = $5
	WHERE tenant = $1 AND job_id = $2 AND effect_key = $3 AND status = 'failed'
	RETURNING ` + effectColumns

	qRecordEffect = `UPDATE job_effects
	SET status = $4, generation = $5, provider_operation_id = $6, result = $7, updated_at = $8
	WHERE tenant = $1 AND job_id = $2 AND effect_key = $3
	RETURNING ` + effectColumns

	qListEffects = `SELECT ` + effectColumns + ` FROM job_effects
	WHERE tenant = $1 AND job_id = $2 ORDER BY effect_key`

	qEffectsForJobs = `SELECT ` + effectColumns + ` FROM job_effects
	WHERE tenant = $1 AND job_id = ANY($2::text[]) ORDER BY job_id, effect_key`
)

// Dead-letter queue.
const (
	// qListDeadJobs pages DEAD jobs newest first; $4/$5 is the cursor
	// (finished_at, id) or NULL.
	qListDeadJobs      = `SELECT ` + jobColumns + qListDeadJobsFrom
	qListDeadJobsBasic = `SELECT ` + jobColumnsBasic + qListDeadJobsFrom
	qListDeadJobsFrom  = qListDeadJobsWhere + qListDeadJobsOrder
	// qListDeadJobsWhere and qListDeadJobsOrder are qListDeadJobsFrom's
	// halves: a filtered list puts its filter (from $7) between them.
	qListDeadJobsWhere = ` FROM jobs j
	WHERE tenant = $1 AND state = 'dead'
	  AND ($2 = '' OR queue = $2)
	  AND ($3 OR NOT abandoned)
	  AND ($4::timestamptz IS NULL OR (finished_at, id) < ($4::timestamptz, $5::text))`
	qListDeadJobsOrder = `
	ORDER BY finished_at DESC, id DESC
	LIMIT $6`

	qMarkReplayed = `UPDATE jobs SET replayed_as = $3, last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = $2 AND state = 'dead' AND replayed_as = '' AND NOT abandoned
	RETURNING last_event_seq`

	qMarkAbandoned = `UPDATE jobs SET abandoned = true, last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = $2 AND state = 'dead' AND replayed_as = '' AND NOT abandoned
	RETURNING ` + jobColumns
)

// Queue policies.
const (
	qGetPolicy = `SELECT ` + policyColumns + ` FROM queue_policies WHERE tenant = $1 AND queue = $2`

	qListPolicies = `SELECT ` + policyColumns + ` FROM queue_policies WHERE tenant = $1`

	// qUpsertPolicy stores a policy and keeps the stored paused flag.
	qUpsertPolicy = `INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns,
		multiplier, jitter_fraction, retryable_codes, non_retryable_codes, total_retry_deadline_ns,
		default_lease_ns, concurrency_limit, max_lease_ns, paused, updated_at, limits)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, false, coalesce($14::timestamptz, now()), $15)
	ON CONFLICT (tenant, queue) DO UPDATE SET
		limits = excluded.limits,
		max_attempts = excluded.max_attempts,
		initial_delay_ns = excluded.initial_delay_ns,
		max_delay_ns = excluded.max_delay_ns,
		multiplier = excluded.multiplier,
		jitter_fraction = excluded.jitter_fraction,
		retryable_codes = excluded.retryable_codes,
		non_retryable_codes = excluded.non_retryable_codes,
		total_retry_deadline_ns = excluded.total_retry_deadline_ns,
		default_lease_ns = excluded.default_lease_ns,
		concurrency_limit = excluded.concurrency_limit,
		max_lease_ns = excluded.max_lease_ns,
		updated_at = excluded.updated_at
	RETURNING ` + policyColumns

	// qSetPaused sets the paused flag, creating the row from the defaults
	// ($3...$13) when the queue has none.
	qSetPaused = `INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns,
		multiplier, jitter_fraction, retryable_codes, non_retryable_codes, total_retry_deadline_ns,
		default_lease_ns, concurrency_limit, max_lease_ns, paused, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, coalesce($15::timestamptz, now()))
	ON CONFLICT (tenant, queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
	RETURNING ` + policyColumns
)

// Statistics.
const (
	// qQueueCounts counts a tenant's jobs by queue and state; available
	// counts queued jobs due at $3, and the last column is the age in
	// microseconds of the oldest of them (the queue's lag).
	qQueueCounts = `SELECT queue, state, count(*),
	       count(*) FILTER (WHERE state = 'queued' AND available_at <= coalesce($3::timestamptz, now())),
	       coalesce((extract(epoch FROM coalesce($3::timestamptz, now())
	           - min(available_at) FILTER (WHERE state = 'queued' AND available_at <= coalesce($3::timestamptz, now())))
	           * 1000000)::bigint, 0)
	FROM jobs
	WHERE tenant = $1 AND ($2 = '' OR queue = $2)
	GROUP BY queue, state`
)

// Retention.
const (
	// qPruneJobs deletes up to $2 terminal jobs finished before $1, across
	// tenants, with every row that hangs off them (idempotency records,
	// events, attempts, checkpoints, effects: none has a foreign key, so
	// this statement is what keeps them from being orphaned). Rows another
	// pruner holds are skipped. No order: the partitions of jobs_done have
	// only a BRIN on finished_at, and whole expired days go by
	// MaintainPartitions.
	qPruneJobs = `WITH victims AS (
		SELECT tenant, id FROM jobs
		WHERE finished_at < $1 AND state IN ('succeeded', 'failed', 'cancelled', 'dead')
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	), keys AS (
		DELETE FROM idempotency_keys k USING victims v
		WHERE k.tenant = v.tenant AND k.job_id = v.id
		RETURNING 1
	), events AS (
		DELETE FROM job_events e USING victims v WHERE e.tenant = v.tenant AND e.job_id = v.id
	), attempts AS (
		DELETE FROM job_attempts a USING victims v WHERE a.tenant = v.tenant AND a.job_id = v.id
	), checkpoints AS (
		DELETE FROM job_checkpoints c USING victims v WHERE c.tenant = v.tenant AND c.job_id = v.id
	), effects AS (
		DELETE FROM job_effects f USING victims v WHERE f.tenant = v.tenant AND f.job_id = v.id
	), deleted AS (
		DELETE FROM jobs j USING victims v
		WHERE j.tenant = v.tenant AND j.id = v.id
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM keys)`

	// qPruneIdempotencyKeys deletes up to $2 expired idempotency records.
	qPruneIdempotencyKeys = `WITH victims AS (
		SELECT tenant, operation, key FROM idempotency_keys
		WHERE expires_at <= coalesce($1::timestamptz, now())
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM idempotency_keys k USING victims v
	WHERE k.tenant = v.tenant AND k.operation = v.operation AND k.key = v.key`
)

// Batched reports (store.ApplyReports). Each statement takes parallel
// arrays, one element per report, and carries every row's own tenant and
// fence.
const (
	// qLockLeases locks the jobs whose current, unexpired lease is one of
	// the tokens ($1 tenants, $2 job ids, $3 workers, $4 generations),
	// judged at $5 (NULL elements: the database clock), in (tenant, id)
	// order: the lock step sits above the sort, so two batches lock in the
	// same order and never deadlock. A token whose fence does not hold
	// returns no row. Each row carries its 1-based position in the arrays,
	// the instant it was judged at and the job's latest checkpoint.
	//
	// The lease-bound statements below name no state: an unexpired (or,
	// for the reaper, an expired) lease_expires_at is a held lease, since
	// jobs_lease_check ties it to state = 'leased'. Naming the state lets
	// the planner read every lease through jobs_leased_idx, a bitmap scan
	// over one entry per lease ever taken until vacuum removes them; keyed
	// by (tenant, id) alone, each token is one primary-key probe (a 32-
	// token lock: 2.0 ms → 0.37 ms with 20,000 dead entries). A held lease
	// is in jobs_live (migration 014), so only that partition is read;
	// reports whose fence did not hold read every partition
	// (qInspectLeases).
	qLockLeases = `SELECT ` + jobColumnsJ + `, r.ord, coalesce(r.now, now()),
		c.id, c.job_id, c.phase, c.state, c.generation, c.parent_id, c.created_at,
		CASE WHEN j.attempt_log IS NOT NULL THEN coalesce((j.attempt_log->-1->>'rd')::bigint, 0)
		WHEN j.events_stored_through = 0 THEN 0
		ELSE coalesce((SELECT a.retry_delay_ns FROM job_attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id
			AND a.generation < j.lease_generation ORDER BY a.generation DESC LIMIT 1), 0) END,
		j.leased_until, j.leased_seq, coalesce(jsonb_array_length(j.attempt_log), 0)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[])
		WITH ORDINALITY AS r(tenant, id, owner, generation, now, ord)
	JOIN jobs_live j ON j.tenant = r.tenant AND j.id = r.id
	LEFT JOIN LATERAL (
		SELECT cp.id, cp.job_id, cp.phase, cp.state, cp.generation, cp.parent_id, cp.created_at
		FROM job_checkpoints cp WHERE cp.tenant = j.tenant AND cp.job_id = j.id
		ORDER BY cp.seq DESC LIMIT 1
	) c ON true
	WHERE j.lease_owner = r.owner AND j.lease_generation = r.generation
	  AND j.lease_expires_at > coalesce(r.now, now())
	ORDER BY j.tenant, j.id
	FOR UPDATE OF j`

	// qInspectLeases reads, for reports whose fence did not hold, each
	// job and the attempt row of the report's generation.
	qInspectLeases = `SELECT ` + jobColumnsJ + `, r.ord,
		a.attempt, a.worker_id, a.outcome, a.error_code, a.error_message, a.error_retryable,
		j.attempt_log::text
	FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(tenant, id, generation, ord)
	JOIN jobs j ON j.tenant = r.tenant AND j.id = r.id
	LEFT JOIN job_attempts a ON a.tenant = r.tenant AND a.job_id = r.id AND a.generation = r.generation`

	// qPoliciesForTenantQueues reads the stored policies of (tenant,
	// queue) pairs.
	qPoliciesForTenantQueues = `SELECT tenant, ` + policyColumns + ` FROM queue_policies
	WHERE (tenant, queue) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

	// qLeaveLeases applies decided transitions (store.Transition) to jobs
	// whose leases were locked by qLockLeases (or, $16, by qLockExpired:
	// then the fence requires the lease to have expired), the fence
	// repeated per row:
	// $6 state, $7 available_at (NULL: unchanged), $8 finished_at, $9 1 to
	// give the attempt back, $10 result (stored when succeeded), $11 whether
	// $12–$14 become the last error, $15 how many event sequences the
	// transition takes, $17 the ended attempt's record (store.AttemptRecord),
	// appended to the attempt log: it is where the transition's events are
	// kept. $18: the log is full (store.Leave.Spill) and drops its oldest
	// record, which qSpillAttempts moved to job_attempts just before.
	// The state condition prunes it to jobs_live (migration 014) without
	// matching jobs_leased_idx's predicate, so each row stays one probe of
	// the key; a row it ends moves to jobs_done or jobs_dead in this
	// statement.
	qLeaveLeases = `UPDATE jobs j
	SET state = u.state,
	    available_at = coalesce(u.available_at, j.available_at),
	    finished_at = u.finished_at,
	    lease_expires_at = NULL,
	    attempts = j.attempts - u.refund,
	    result = CASE WHEN u.state = 'succeeded' THEN u.result ELSE j.result END,
	    last_error_code = CASE WHEN u.set_error THEN u.code ELSE j.last_error_code END,
	    last_error_message = CASE WHEN u.set_error THEN u.message ELSE j.last_error_message END,
	    last_error_retryable = CASE WHEN u.set_error THEN u.retryable ELSE j.last_error_retryable END,
	    last_event_seq = j.last_event_seq + u.nevents,
	    events_stored_through = least(j.events_stored_through, j.last_event_seq),
	    attempt_log = CASE WHEN u.spill THEN (j.attempt_log - 0) || u.record::jsonb
	        ELSE coalesce(j.attempt_log, '[]') || u.record::jsonb END
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::text[],
		$7::timestamptz[], $8::timestamptz[], $9::int[], $10::bytea[], $11::bool[], $12::text[],
		$13::text[], $14::bool[], $15::int[], $16::bool[], $17::text[], $18::bool[])
		AS u(tenant, id, owner, generation, now, state, available_at, finished_at, refund, result,
		     set_error, code, message, retryable, nevents, expired, record, spill)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.lease_owner = u.owner
	  AND j.lease_generation = u.generation AND j.state NOT IN ('succeeded', 'failed', 'cancelled', 'dead')
	  AND CASE WHEN u.expired THEN j.lease_expires_at <= u.now ELSE j.lease_expires_at > u.now END`

	// qSpillAttempts moves the oldest record of full attempt logs ($1
	// tenants, $2 job ids; store.AttemptLogCap records each) to
	// job_attempts, so only such jobs write there.
	qSpillAttempts = `INSERT INTO job_attempts (tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at,
		outcome, error_code, error_message, error_retryable, retry_delay_ns, record)
	SELECT j.tenant, j.id, (r->>'n')::int, (r->>'g')::bigint, r->>'w', (r->>'c')::timestamptz,
		(r->>'f')::timestamptz, r->>'o', r->>'ec', r->>'em', (r->>'er')::bool, coalesce((r->>'rd')::bigint, 0), r
	FROM unnest($1::text[], $2::text[]) AS u(tenant, id)
	JOIN jobs j ON j.tenant = u.tenant AND j.id = u.id
	CROSS JOIN LATERAL (SELECT j.attempt_log->0 AS r) x`

	// qRenewLeases extends leases to $6, each fenced at the instant $5 it
	// was judged at. It names jobs_live, the partition of leased jobs
	// (migration 014), so it plans no other partition.
	qRenewLeases = `UPDATE jobs_live j SET lease_expires_at = u.expires
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[])
		AS u(tenant, id, owner, generation, now, expires)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.lease_owner = u.owner
	  AND j.lease_generation = u.generation AND j.lease_expires_at > u.now`
)

// Set-based creates (CreateJobs).
const (
	// qTakeIdempotencyKeys takes request ids ($1 tenants, $2 keys, $3
	// fingerprints, $4 new job ids, $5 expiries) for new jobs, in sorted
	// order, and returns the ones it took: the free keys, and those whose
	// record expired at $6. A key whose live record another transaction
	// just wrote waits for it and is then not taken; its conflicting row is
	// always read at its newest version, so a job committed meanwhile is
	// never missed.
	qTakeIdempotencyKeys = `INSERT INTO idempotency_keys AS k (tenant, operation, key, fingerprint, job_id, expires_at)
	SELECT u.tenant, 'create_job', u.key, u.fp, u.job_id, u.expires
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[])
		AS u(tenant, key, fp, job_id, expires, now)
	ORDER BY u.tenant, u.key
	ON CONFLICT (tenant, operation, key) DO UPDATE
	SET fingerprint = excluded.fingerprint, job_id = excluded.job_id, expires_at = excluded.expires_at
	WHERE k.expires_at <= (SELECT min(now) FROM unnest($6::timestamptz[]) AS t(now))
	RETURNING k.tenant, k.key`

	// qHeldIdempotencyKeys reads the live records of request ids that
	// qTakeIdempotencyKeys did not take, by 1-based position.
	qHeldIdempotencyKeys = `SELECT r.ord, k.fingerprint, k.job_id, k.expires_at
	FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(tenant, key, ord)
	JOIN idempotency_keys k ON k.tenant = r.tenant AND k.operation = 'create_job' AND k.key = r.key`

	// qReleaseIdempotencyKeys drops records taken for jobs that will not
	// be created (their call failed).
	qReleaseIdempotencyKeys = `DELETE FROM idempotency_keys k
	USING unnest($1::text[], $2::text[], $3::text[]) AS u(tenant, key, job_id)
	WHERE k.tenant = u.tenant AND k.operation = 'create_job' AND k.key = u.key AND k.job_id = u.job_id`

	// qJobsByIDs reads jobs of several tenants with their latest
	// checkpoints.
	qJobsByIDs = `SELECT ` + jobColumnsJ + `,
		c.id, c.job_id, c.phase, c.state, c.generation, c.parent_id, c.created_at
	FROM unnest($1::text[], $2::text[]) AS r(tenant, id)
	JOIN jobs j ON j.tenant = r.tenant AND j.id = r.id
	LEFT JOIN LATERAL (
		SELECT cp.id, cp.job_id, cp.phase, cp.state, cp.generation, cp.parent_id, cp.created_at
		FROM job_checkpoints cp WHERE cp.tenant = j.tenant AND cp.job_id = j.id
		ORDER BY cp.seq DESC LIMIT 1
	) c ON true`

	// qInsertJobs inserts QUEUED jobs. Their QUEUED event (sequence 1) is
	// derived from the row: queued_available_at keeps the create's
	// available_at when it is not the creation time.
	qInsertJobs = `INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, dependency, last_event_seq, concurrency_key,
		queued_available_at, events_stored_through)
	SELECT u.tenant, u.id, u.queue, u.kind, u.payload, u.metadata::jsonb, u.priority, 'queued',
		u.max_attempts, u.created_at, u.available_at, u.retry_deadline, u.dependency, 1, u.concurrency_key,
		nullif(u.available_at, u.created_at), 0
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int[], $8::int[],
		$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::text[])
		AS u(tenant, id, queue, kind, payload, metadata, priority, max_attempts, created_at, available_at,
		     retry_deadline, dependency, concurrency_key)`

	// qInsertJobsNow is qInsertJobs whose times, when null, are taken from
	// the transaction's now() plus an offset in microseconds ($14
	// available_at, $15 retry_deadline, a null offset for no deadline).
	qInsertJobsNow = `INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, dependency, last_event_seq, concurrency_key,
		queued_available_at, events_stored_through)
	SELECT v.tenant, v.id, v.queue, v.kind, v.payload, v.metadata::jsonb, v.priority, 'queued',
		v.max_attempts, v.created_at, v.available_at, v.retry_deadline, v.dependency, 1, v.concurrency_key,
		nullif(v.available_at, v.created_at), 0
	FROM (SELECT u.tenant, u.id, u.queue, u.kind, u.payload, u.metadata, u.priority, u.max_attempts,
			coalesce(u.created_at, now()) AS created_at,
			coalesce(u.available_at, now() + u.available_off * interval '1 microsecond') AS available_at,
			coalesce(u.retry_deadline, now() + u.deadline_off * interval '1 microsecond') AS retry_deadline,
			u.dependency, u.concurrency_key
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int[], $8::int[],
			$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::text[], $14::bigint[], $15::bigint[])
			AS u(tenant, id, queue, kind, payload, metadata, priority, max_attempts, created_at, available_at,
			     retry_deadline, dependency, concurrency_key, available_off, deadline_off)) v`
)
