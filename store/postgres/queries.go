package postgres

// The engine's SQL, one named query per statement. Every query is filtered
// by tenant (Prune alone works across tenants). $now parameters are passed
// either as coalesce($n::timestamptz, now()) or as the instant the
// transaction resolved with txNow; both mean "the caller's Now, else the
// database clock".

const (
	qNow           = `SELECT now()`
	qNotify        = `SELECT pg_notify($1, $2)`
	qCurrentSchema = `SELECT coalesce(current_schema(), '')`

	// jobColumns is the column list scanJob reads.
	jobColumns = `tenant, id, queue, kind, payload, metadata::text, priority, state,
	attempts, max_attempts, lease_owner, lease_generation, lease_expires_at,
	cancel_requested, cancel_reason, created_at, available_at, finished_at,
	retry_deadline, last_error_code, last_error_message, last_error_retryable,
	result, replay_of, replayed_as, abandoned, dependency, last_event_seq`

	// jobColumnsJ is jobColumns qualified by the alias j, for statements
	// that join jobs with rows of the same column names.
	jobColumnsJ = `j.tenant, j.id, j.queue, j.kind, j.payload, j.metadata::text, j.priority, j.state,
	j.attempts, j.max_attempts, j.lease_owner, j.lease_generation, j.lease_expires_at,
	j.cancel_requested, j.cancel_reason, j.created_at, j.available_at, j.finished_at,
	j.retry_deadline, j.last_error_code, j.last_error_message, j.last_error_retryable,
	j.result, j.replay_of, j.replayed_as, j.abandoned, j.dependency, j.last_event_seq`

	checkpointColumns = `id, job_id, phase, state, generation, parent_id, created_at`

	effectColumns = `job_id, effect_key, status, generation, provider_operation_id, result, created_at, updated_at`

	attemptColumns = `job_id, attempt, generation, worker_id, claimed_at, finished_at, outcome,
	error_code, error_message, error_retryable`

	policyColumns = `queue, max_attempts, initial_delay_ns, max_delay_ns, multiplier, jitter_fraction,
	retryable_codes, non_retryable_codes, total_retry_deadline_ns, default_lease_ns,
	concurrency_limit, paused`
)

// Jobs and events.
const (
	qGetJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = $1 AND id = $2`

	qLockJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = $1 AND id = $2 FOR UPDATE`

	qJobExists = `SELECT true FROM jobs WHERE tenant = $1 AND id = $2`

	// qInsertJob inserts a QUEUED job whose first event (sequence 1) the
	// same transaction inserts.
	qInsertJob = `INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, replay_of, dependency, last_event_seq)
	VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, 'queued', $8, $9, $10, $11, $12, $13, 1)
	RETURNING ` + jobColumns

	// qBumpEventSeq reserves the next event sequence of a job. The row lock
	// it takes serialises appends, so sequences are unique and gapless.
	qBumpEventSeq = `UPDATE jobs SET last_event_seq = last_event_seq + $3
	WHERE tenant = $1 AND id = $2 RETURNING last_event_seq`

	qInsertEvent = `INSERT INTO job_events (tenant, job_id, seq, type, at, data)
	VALUES ($1, $2, $3, $4, $5, $6::jsonb)`

	// qInsertEvents appends events of several jobs whose sequences the
	// caller already reserved.
	qInsertEvents = `INSERT INTO job_events (tenant, job_id, seq, type, at, data)
	SELECT $1, e.job_id, e.seq, e.type, $2, e.data::jsonb
	FROM unnest($3::text[], $4::bigint[], $5::text[], $6::text[]) AS e(job_id, seq, type, data)`

	qListEvents = `SELECT job_id, seq, type, at, data::text FROM job_events
	WHERE tenant = $1 AND job_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`

	// qListJobs pages jobs newest first; $6/$7 is the cursor (created_at,
	// id) of the last row of the previous page, or NULL.
	qListJobs = `SELECT ` + jobColumns + ` FROM jobs
	WHERE tenant = $1
	  AND ($2 = '' OR queue = $2)
	  AND ($3 = '' OR kind = $3)
	  AND (cardinality($4::text[]) = 0 OR state = ANY($4::text[]))
	  AND ($5::timestamptz IS NULL OR (created_at, id) < ($5::timestamptz, $6::text))
	ORDER BY created_at DESC, id DESC
	LIMIT $7`
)

// Idempotency.
const (
	// qClaimIdempotencyKey takes the key for a new job. It returns a row
	// when the key was free or its record expired (expires_at <= now), and
	// no row when a live record holds it. A concurrent insert of the same
	// key blocks until the other transaction ends, so exactly one of them
	// makes the job. (The WHERE clause reads only the conflicting row,
	// which is always its newest version; a subquery there would run on the
	// statement's older snapshot and miss a job committed meanwhile.)
	qClaimIdempotencyKey = `INSERT INTO idempotency_keys AS k (tenant, operation, key, fingerprint, job_id, expires_at)
	VALUES ($1, 'create_job', $2, $3, $4, $5)
	ON CONFLICT (tenant, operation, key) DO UPDATE
	SET fingerprint = excluded.fingerprint, job_id = excluded.job_id, expires_at = excluded.expires_at
	WHERE k.expires_at <= $6
	RETURNING true`

	qGetIdempotencyKey = `SELECT fingerprint, job_id FROM idempotency_keys
	WHERE tenant = $1 AND operation = 'create_job' AND key = $2`

	// qRetargetIdempotencyKey gives a live record whose job is gone to a
	// new job: such a record counts as expired.
	qRetargetIdempotencyKey = `UPDATE idempotency_keys SET fingerprint = $3, job_id = $4, expires_at = $5
	WHERE tenant = $1 AND operation = 'create_job' AND key = $2`
)

// Claim.
const (
	// qAdvisoryLockQueue serialises claims on one (tenant, queue) with a
	// concurrency limit until the transaction ends. The two-key form keeps
	// these locks apart from goose's single-key migration lock.
	qAdvisoryLockQueue = `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`

	// qActiveLeases counts the unexpired leases of the queues.
	qActiveLeases = `SELECT queue, count(*) FROM jobs
	WHERE tenant = $1 AND queue = ANY($2::text[]) AND state = 'leased' AND lease_expires_at > $3
	GROUP BY queue`

	// qCancelExpiredRequested and qDeadLetterExpired take $3 = the
	// caller's Now or NULL (the database clock), so that Claim can pipeline
	// them with the statement that reads the clock.
	//
	// qCancelExpiredRequested ends, as CANCELLED, the jobs of the queues
	// whose cancellation was requested and whose holder let the lease
	// expire without acknowledging: they can never be claimed again.
	qCancelExpiredRequested = `UPDATE jobs j
	SET state = 'cancelled', finished_at = coalesce($3::timestamptz, now()), lease_expires_at = NULL, last_event_seq = j.last_event_seq + 1
	FROM (
		SELECT tenant, id FROM jobs
		WHERE tenant = $1 AND queue = ANY($2::text[]) AND state = 'leased'
		  AND cancel_requested AND lease_expires_at <= coalesce($3::timestamptz, now())
		ORDER BY lease_expires_at
		LIMIT 1000
		FOR UPDATE SKIP LOCKED
	) c
	WHERE j.tenant = c.tenant AND j.id = c.id
	RETURNING j.id, j.lease_owner, j.lease_generation, j.last_event_seq, j.cancel_reason`

	// qDeadLetterExpired ends, as DEAD, the jobs of the queues whose lease
	// expired with no report while their budget is spent (attempts >=
	// max_attempts, or the retry deadline passed): a worker that crashes
	// on a job every time never reports, so no Retry would ever end it and
	// it would be claimed forever. The caller appends the three events
	// whose sequences this reserves (LEASE_EXPIRED, RUN_FAILED, DEAD).
	// Cancel-requested jobs are qCancelExpiredRequested's. $4/$5 are the
	// last error's code and message.
	qDeadLetterExpired = `UPDATE jobs j
	SET state = 'dead', finished_at = coalesce($3::timestamptz, now()), lease_expires_at = NULL,
	    last_error_code = $4, last_error_message = $5, last_error_retryable = true,
	    last_event_seq = j.last_event_seq + 3
	FROM (
		SELECT tenant, id FROM jobs
		WHERE tenant = $1 AND queue = ANY($2::text[]) AND state = 'leased'
		  AND NOT cancel_requested AND lease_expires_at <= coalesce($3::timestamptz, now())
		  AND (attempts >= max_attempts OR retry_deadline < coalesce($3::timestamptz, now()))
		ORDER BY lease_expires_at
		LIMIT 1000
		FOR UPDATE SKIP LOCKED
	) d
	WHERE j.tenant = d.tenant AND j.id = d.id
	RETURNING j.id, j.lease_owner, j.lease_generation, j.last_event_seq, j.attempts, j.max_attempts`

	// qClaim selects and leases in one statement. For every queue
	// ($2 names, $3 how many jobs it may still take, $4 its lease in
	// nanoseconds) it walks the claim index (queued and available) and the
	// lease-expiry index (leased and expired, with budget left: a spent
	// one is never taken over, see qDeadLetterExpired) in order,
	// LIMIT-bounded, so a claim is O(log n) per queue whatever the table
	// size. Rows another
	// claimer holds are skipped, not waited for. The candidates are merged
	// in claim order (priority desc, available_at, id), each queue capped
	// at its share, cut to $6 jobs, and leased: generation + 1, attempts +
	// 1, one event sequence per event the claim appends (LEASED, preceded
	// by LEASE_EXPIRED on a takeover). RETURNING carries the previous
	// holder so the caller can close its attempt.
	qClaim = `WITH q AS (
		SELECT * FROM unnest($2::text[], $3::int[], $4::bigint[]) AS q(queue, cap, lease_ns)
	), candidates AS (
		SELECT c.*, q.cap, q.lease_ns FROM q CROSS JOIN LATERAL (
			SELECT j.id, j.queue, j.priority, j.available_at,
			       j.state AS prev_state, j.lease_owner AS prev_owner, j.lease_generation AS prev_generation
			FROM jobs j
			WHERE j.tenant = $1 AND j.queue = q.queue AND j.state = 'queued'
			  AND j.available_at <= $5 AND NOT j.cancel_requested
			ORDER BY j.priority DESC, j.available_at, j.id
			LIMIT q.cap
			FOR UPDATE SKIP LOCKED
		) c
		UNION ALL
		SELECT c.*, q.cap, q.lease_ns FROM q CROSS JOIN LATERAL (
			SELECT j.id, j.queue, j.priority, j.available_at,
			       j.state AS prev_state, j.lease_owner AS prev_owner, j.lease_generation AS prev_generation
			FROM jobs j
			WHERE j.tenant = $1 AND j.queue = q.queue AND j.state = 'leased'
			  AND j.lease_expires_at <= $5 AND NOT j.cancel_requested
			  AND j.attempts < j.max_attempts AND (j.retry_deadline IS NULL OR j.retry_deadline >= $5)
			ORDER BY j.lease_expires_at
			LIMIT q.cap
			FOR UPDATE SKIP LOCKED
		) c
	), ranked AS (
		SELECT candidates.*,
		       row_number() OVER (PARTITION BY queue ORDER BY priority DESC, available_at, id) AS rn
		FROM candidates
	), picked AS (
		SELECT * FROM ranked WHERE rn <= cap
		ORDER BY priority DESC, available_at, id
		LIMIT $6
	)
	UPDATE jobs j
	SET state = 'leased',
	    lease_owner = $7,
	    lease_generation = j.lease_generation + 1,
	    attempts = j.attempts + 1,
	    lease_expires_at = $5::timestamptz + (p.lease_ns / 1000) * interval '1 microsecond',
	    last_event_seq = j.last_event_seq + CASE WHEN p.prev_state = 'leased' THEN 2 ELSE 1 END
	FROM picked p
	WHERE j.tenant = $1 AND j.id = p.id
	RETURNING ` + jobColumnsJ + `, p.prev_state, p.prev_owner, p.prev_generation`

	// qInsertAttempts opens the attempt rows of claimed jobs.
	qInsertAttempts = `INSERT INTO job_attempts (tenant, job_id, attempt, generation, worker_id, claimed_at, outcome)
	SELECT $1, a.job_id, a.attempt, a.generation, $2, $3, 'running'
	FROM unnest($4::text[], $5::int[], $6::bigint[]) AS a(job_id, attempt, generation)`

	// qCloseAttempts ends running attempts of several jobs with one outcome.
	qCloseAttempts = `UPDATE job_attempts a SET outcome = $2, finished_at = $3
	FROM unnest($4::text[], $5::bigint[]) AS t(job_id, generation)
	WHERE a.tenant = $1 AND a.job_id = t.job_id AND a.generation = t.generation AND a.outcome = 'running'`
)

// Lease-bound calls.
const (
	// qRenew extends the leases of several tokens ($2 job ids, $3 workers,
	// $4 generations) in one statement, each by $5 nanoseconds, or by its
	// queue's default lease when $5 is NULL. It matches only current,
	// unexpired leases. The lateral subquery locks them one by one in
	// job-id order (its LIMIT keeps it a nested loop over the sorted
	// tokens), so that overlapping renewals cannot deadlock; FOR UPDATE
	// rechecks the lease on the row's newest version. A token that matches
	// nothing returns no row.
	qRenew = `WITH locked AS (
		SELECT j.tenant, j.id
		FROM (
			SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[]) AS t(id, owner, generation)
			ORDER BY id
		) t
		CROSS JOIN LATERAL (
			SELECT j.tenant, j.id FROM jobs j
			WHERE j.tenant = $1 AND j.id = t.id AND j.state = 'leased' AND j.lease_owner = t.owner
			  AND j.lease_generation = t.generation AND j.lease_expires_at > coalesce($6::timestamptz, now())
			FOR UPDATE
			LIMIT 1
		) j
	)
	UPDATE jobs j
	SET lease_expires_at = coalesce($6::timestamptz, now()) + (coalesce($5::bigint,
	    (SELECT qp.default_lease_ns FROM queue_policies qp WHERE qp.tenant = j.tenant AND qp.queue = j.queue),
	    $7::bigint) / 1000) * interval '1 microsecond'
	FROM (SELECT DISTINCT tenant, id FROM locked) l
	WHERE j.tenant = l.tenant AND j.id = l.id
	RETURNING j.id, j.lease_owner, j.lease_generation, j.cancel_requested, j.lease_expires_at`

	// qLockLease is the lease compare-and-set of every lease-bound call: it
	// locks the job only while (state = leased, owner, generation,
	// unexpired) holds, and returns the transaction's instant with it.
	qLockLease = `SELECT ` + jobColumns + `, coalesce($5::timestamptz, now()) FROM jobs
	WHERE tenant = $1 AND id = $2 AND state = 'leased' AND lease_owner = $3
	  AND lease_generation = $4 AND lease_expires_at > coalesce($5::timestamptz, now())
	FOR UPDATE`

	// qLeaveLease moves a job locked by qLockLease out of LEASED and reserves
	// the sequences of the $10 events the caller appends.
	qLeaveLease = `UPDATE jobs
	SET state = $3,
	    available_at = coalesce($4::timestamptz, available_at),
	    finished_at = $5,
	    lease_expires_at = NULL,
	    attempts = attempts - $6,
	    result = CASE WHEN $3 = 'succeeded' THEN $7::bytea ELSE result END,
	    last_error_code = coalesce($8::text, last_error_code),
	    last_error_message = CASE WHEN $8::text IS NULL THEN last_error_message ELSE $9::text END,
	    last_error_retryable = CASE WHEN $8::text IS NULL THEN last_error_retryable ELSE $11::boolean END,
	    last_event_seq = last_event_seq + $10
	WHERE tenant = $1 AND id = $2 AND state = 'leased'
	RETURNING ` + jobColumns

	qCloseAttempt = `UPDATE job_attempts
	SET outcome = $4, finished_at = $5, error_code = $6, error_message = $7, error_retryable = $8
	WHERE tenant = $1 AND job_id = $2 AND generation = $3`

	qGetAttempt = `SELECT ` + attemptColumns + ` FROM job_attempts
	WHERE tenant = $1 AND job_id = $2 AND generation = $3`

	qListAttempts = `SELECT ` + attemptColumns + ` FROM job_attempts
	WHERE tenant = $1 AND job_id = $2 ORDER BY generation`

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

	qLatestCheckpoints = `SELECT DISTINCT ON (job_id) ` + checkpointColumns + ` FROM job_checkpoints
	WHERE tenant = $1 AND job_id = ANY($2::text[]) ORDER BY job_id, seq DESC`

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
	qListDeadJobs = `SELECT ` + jobColumns + ` FROM jobs
	WHERE tenant = $1 AND state = 'dead'
	  AND ($2 = '' OR queue = $2)
	  AND ($3 OR NOT abandoned)
	  AND ($4::timestamptz IS NULL OR (finished_at, id) < ($4::timestamptz, $5::text))
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

	qPoliciesForQueues = `SELECT ` + policyColumns + ` FROM queue_policies
	WHERE tenant = $1 AND queue = ANY($2::text[])`

	qListPolicies = `SELECT ` + policyColumns + ` FROM queue_policies WHERE tenant = $1`

	// qUpsertPolicy stores a policy and keeps the stored paused flag.
	qUpsertPolicy = `INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns,
		multiplier, jitter_fraction, retryable_codes, non_retryable_codes, total_retry_deadline_ns,
		default_lease_ns, concurrency_limit, paused, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, false, coalesce($13::timestamptz, now()))
	ON CONFLICT (tenant, queue) DO UPDATE SET
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
		updated_at = excluded.updated_at
	RETURNING ` + policyColumns

	// qSetPaused sets the paused flag, creating the row from the defaults
	// ($3...$12) when the queue has none.
	qSetPaused = `INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns,
		multiplier, jitter_fraction, retryable_codes, non_retryable_codes, total_retry_deadline_ns,
		default_lease_ns, concurrency_limit, paused, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, coalesce($14::timestamptz, now()))
	ON CONFLICT (tenant, queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
	RETURNING ` + policyColumns
)

// Statistics.
const (
	// qQueueCounts counts a tenant's jobs by queue and state; available
	// counts queued jobs due at $3.
	qQueueCounts = `SELECT queue, state, count(*),
	       count(*) FILTER (WHERE state = 'queued' AND available_at <= coalesce($3::timestamptz, now()))
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
	// pruner holds are skipped.
	qPruneJobs = `WITH victims AS (
		SELECT tenant, id FROM jobs
		WHERE finished_at < $1 AND state IN ('succeeded', 'failed', 'cancelled', 'dead')
		ORDER BY finished_at
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
	qLockLeases = `SELECT ` + jobColumnsJ + `, r.ord, coalesce(r.now, now()),
		c.id, c.job_id, c.phase, c.state, c.generation, c.parent_id, c.created_at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[])
		WITH ORDINALITY AS r(tenant, id, owner, generation, now, ord)
	JOIN jobs j ON j.tenant = r.tenant AND j.id = r.id
	LEFT JOIN LATERAL (
		SELECT cp.id, cp.job_id, cp.phase, cp.state, cp.generation, cp.parent_id, cp.created_at
		FROM job_checkpoints cp WHERE cp.tenant = j.tenant AND cp.job_id = j.id
		ORDER BY cp.seq DESC LIMIT 1
	) c ON true
	WHERE j.state = 'leased' AND j.lease_owner = r.owner AND j.lease_generation = r.generation
	  AND j.lease_expires_at > coalesce(r.now, now())
	ORDER BY j.tenant, j.id
	FOR UPDATE OF j`

	// qInspectLeases reads, for reports whose fence did not hold, each
	// job and the attempt row of the report's generation.
	qInspectLeases = `SELECT ` + jobColumnsJ + `, r.ord,
		a.attempt, a.worker_id, a.outcome, a.error_code, a.error_message, a.error_retryable
	FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(tenant, id, generation, ord)
	JOIN jobs j ON j.tenant = r.tenant AND j.id = r.id
	LEFT JOIN job_attempts a ON a.tenant = r.tenant AND a.job_id = r.id AND a.generation = r.generation`

	// qPoliciesForTenantQueues reads the stored policies of (tenant,
	// queue) pairs.
	qPoliciesForTenantQueues = `SELECT tenant, ` + policyColumns + ` FROM queue_policies
	WHERE (tenant, queue) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

	// qLeaveLeases applies decided transitions (store.Transition) to jobs
	// whose leases were locked by qLockLeases, the fence repeated per row:
	// $6 state, $7 available_at (NULL: unchanged), $8 finished_at, $9 1 to
	// give the attempt back, $10 result (stored when succeeded), $11 whether
	// $12–$14 become the last error, $15 how many event sequences the
	// caller appends.
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
	    last_event_seq = j.last_event_seq + u.nevents
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::text[],
		$7::timestamptz[], $8::timestamptz[], $9::int[], $10::bytea[], $11::bool[], $12::text[],
		$13::text[], $14::bool[], $15::int[])
		AS u(tenant, id, owner, generation, now, state, available_at, finished_at, refund, result,
		     set_error, code, message, retryable, nevents)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.state = 'leased' AND j.lease_owner = u.owner
	  AND j.lease_generation = u.generation AND j.lease_expires_at > u.now`

	// qInsertEventsMulti appends events of several tenants' jobs whose
	// sequences the caller reserved.
	qInsertEventsMulti = `INSERT INTO job_events (tenant, job_id, seq, type, at, data)
	SELECT e.tenant, e.job_id, e.seq, e.type, e.at, e.data::jsonb
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[], $6::text[])
		AS e(tenant, job_id, seq, type, at, data)`

	// qCloseAttemptsMulti ends attempt rows, each with its own outcome and
	// error ($6: whether $7–$9 are set).
	qCloseAttemptsMulti = `UPDATE job_attempts a
	SET outcome = u.outcome, finished_at = u.at,
	    error_code = CASE WHEN u.has_error THEN u.code END,
	    error_message = CASE WHEN u.has_error THEN u.message END,
	    error_retryable = CASE WHEN u.has_error THEN u.retryable END
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[], $6::bool[],
		$7::text[], $8::text[], $9::bool[])
		AS u(tenant, job_id, generation, outcome, at, has_error, code, message, retryable)
	WHERE a.tenant = u.tenant AND a.job_id = u.job_id AND a.generation = u.generation`

	// qRenewLeases extends leases to $6, each fenced at the instant $5 it
	// was judged at.
	qRenewLeases = `UPDATE jobs j SET lease_expires_at = u.expires
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[])
		AS u(tenant, id, owner, generation, now, expires)
	WHERE j.tenant = u.tenant AND j.id = u.id AND j.state = 'leased' AND j.lease_owner = u.owner
	  AND j.lease_generation = u.generation AND j.lease_expires_at > u.now`
)
