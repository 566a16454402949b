package sqlite

// Every SQL statement of the engine, by name. Where an operation exists in
// the PostgreSQL engine too, the constant has the same name there, so the two
// engines can be read side by side. Parameters are numbered (?1, ?2, ...)
// because several are used more than once. Times are INTEGER unix
// microseconds; ?now is always the transaction's clock reading, never
// SQLite's own clock, so tests can inject time.

// jobSelect reads a job together with its latest checkpoint (the one with
// the highest seq). Callers append a WHERE clause on j.
const jobSelect = jobSelectColumns + jobSelectFrom

// jobSelectColumns and jobSelectFrom are jobSelect's two halves, so that a
// statement can read more columns of the job after the ones scanJob reads.
const jobSelectColumns = `
SELECT j.tenant, j.id, j.queue, j.kind, j.payload, j.metadata, j.priority, j.state,
       j.attempts, j.max_attempts, j.lease_owner, j.lease_generation, j.lease_expires_at,
       j.cancel_requested, j.created_at, j.available_at, j.finished_at, j.retry_deadline,
       j.last_error_code, j.last_error_message, j.last_error_retryable, j.result,
       j.replay_of, j.replayed_as, j.abandoned, j.dependency, j.leased_at, j.concurrency_key,
       c.id, c.phase, c.state, c.generation, c.parent_id, c.created_at`

// jobSelectBasic is jobSelect without the payload, the result and the
// checkpoint's state (NULL in their places, so scanJob reads either), for
// BASIC lists.
const jobSelectBasic = `
SELECT j.tenant, j.id, j.queue, j.kind, NULL, j.metadata, j.priority, j.state,
       j.attempts, j.max_attempts, j.lease_owner, j.lease_generation, j.lease_expires_at,
       j.cancel_requested, j.created_at, j.available_at, j.finished_at, j.retry_deadline,
       j.last_error_code, j.last_error_message, j.last_error_retryable, NULL,
       j.replay_of, j.replayed_as, j.abandoned, j.dependency, j.leased_at, j.concurrency_key,
       c.id, c.phase, NULL, c.generation, c.parent_id, c.created_at` + jobSelectFrom

const jobSelectFrom = `
FROM jobs j` + checkpointJoin

// checkpointJoin joins the job j with its latest checkpoint c.
const checkpointJoin = `
LEFT JOIN job_checkpoints c
       ON c.tenant = j.tenant AND c.job_id = j.id
      AND c.seq = (SELECT max(seq) FROM job_checkpoints m WHERE m.tenant = j.tenant AND m.job_id = j.id)
`

// qGetJob reads one job of a tenant.
const qGetJob = jobSelect + `WHERE j.tenant = ?1 AND j.id = ?2`

// qInsertJob inserts a new QUEUED job. With ?16 = 0 it has no events yet
// and the caller appends its queued event in the same transaction; with
// ?16 = 1 its QUEUED event is derived from the row (store.DeriveEvents),
// ?17 keeping the create's available_at when it is not the creation time.
const qInsertJob = `
INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
                  attempts, max_attempts, created_at, available_at, retry_deadline,
                  replay_of, dependency, concurrency_key, unique_key, last_event_seq, queued_available_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 0, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)`

// qBumpEventSeq reserves the job's next event sequence. The UPDATE takes the
// row (the database write lock, on SQLite), so concurrent appends to one job
// serialise and sequences stay gapless.
const qBumpEventSeq = `
UPDATE jobs SET last_event_seq = last_event_seq + 1
WHERE tenant = ?1 AND id = ?2
RETURNING last_event_seq`

// qInsertEvent appends an event with the sequence qBumpEventSeq returned.
const qInsertEvent = `
INSERT INTO job_events (tenant, job_id, seq, type, at, data)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)`

// qListJobs pages a tenant's jobs newest first. ?2/?3 filter queue and kind
// when not empty, ?4 is a JSON array of states (empty: all), ?5/?6 the
// cursor (created_at, id; ?5 NULL on the first page), ?7 the limit.
const (
	qListJobs      = jobSelect + qListJobsWhere
	qListJobsBasic = jobSelectBasic + qListJobsWhere
)

const qListJobsWhere = qListJobsConds + qListJobsOrder

// qListJobsConds and qListJobsOrder are qListJobsWhere's halves: a
// filtered list puts its filter (filterSQL, from ?8) between them.
const (
	qListJobsConds = `
WHERE j.tenant = ?1
  AND (?2 = '' OR j.queue = ?2)
  AND (?3 = '' OR j.kind = ?3)
  AND (json_array_length(?4) = 0 OR j.state IN (SELECT value FROM json_each(?4)))
  AND (?5 IS NULL OR j.created_at < ?5 OR (j.created_at = ?5 AND j.id < ?6))`
	qListJobsOrder = `
ORDER BY j.created_at DESC, j.id DESC
LIMIT ?7`
)

// qCountJobs counts the jobs of tenant ?1 that match a filter (from ?3),
// up to ?2 of them (-1: all).
const qCountJobs = `SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.tenant = ?1 AND %s LIMIT ?2)`

// qSampleJobs reads the newest ?2 jobs of tenant ?1 that match a filter
// (from ?3).
const qSampleJobs = jobSelectBasic + `WHERE j.tenant = ?1 AND %s
ORDER BY j.created_at DESC, j.id DESC LIMIT ?2`

// qJobExists checks that a job exists for the tenant.
const qJobExists = `SELECT 1 FROM jobs WHERE tenant = ?1 AND id = ?2`

// qJobHistory reads what a job row holds of its history (migration 013).
const qJobHistory = `
SELECT created_at, queue, state, lease_owner, lease_generation, attempts, leased_at,
       queued_available_at, leased_until, leased_seq, events_stored_through, coalesce(attempt_log, '')
FROM jobs WHERE tenant = ?1 AND id = ?2`

// qSpilledAttempts reads the records of the attempts that moved out of the
// row past store.AttemptLogCap.
const qSpilledAttempts = `
SELECT record FROM job_attempts WHERE tenant = ?1 AND job_id = ?2 AND record IS NOT NULL ORDER BY generation`

// qAttemptLog reads a job's attempt log.
const qAttemptLog = `SELECT coalesce(attempt_log, '') FROM jobs WHERE tenant = ?1 AND id = ?2`

// qListEvents reads a job's stored events after a sequence, in order.
const qListEvents = `
SELECT job_id, seq, type, at, data FROM job_events
WHERE tenant = ?1 AND job_id = ?2 AND seq > ?3
ORDER BY seq
LIMIT ?4`

// qListAttempts reads a job's attempt rows written before migration 013,
// oldest first, and, while the job is leased, its running attempt from
// the job row. (Attempts since are records: the row's log, and those
// moved out of it.)
const qListAttempts = `
SELECT job_id, attempt, generation, worker_id, claimed_at, finished_at, outcome,
       error_code, error_message, error_retryable
FROM job_attempts
WHERE tenant = ?1 AND job_id = ?2 AND record IS NULL
UNION ALL
SELECT id, attempts, lease_generation, lease_owner, leased_at, NULL, 'running', NULL, NULL, NULL
FROM jobs WHERE tenant = ?1 AND id = ?2 AND state = 'leased'
ORDER BY generation`

// qGetAttempt reads the attempt row of one lease generation.
const qGetAttempt = `
SELECT worker_id, outcome FROM job_attempts
WHERE tenant = ?1 AND job_id = ?2 AND generation = ?3`

// qGetIdempotencyKey reads a create_job idempotency record.
const qGetIdempotencyKey = `
SELECT fingerprint, job_id, expires_at FROM idempotency_keys
WHERE tenant = ?1 AND operation = 'create_job' AND key = ?2`

// qDeleteIdempotencyKey removes a record that expired (or whose job is gone)
// so the key can be used again.
const qDeleteIdempotencyKey = `
DELETE FROM idempotency_keys WHERE tenant = ?1 AND operation = 'create_job' AND key = ?2`

// qInsertIdempotencyKey records a create_job key for the dedup window.
const qInsertIdempotencyKey = `
INSERT INTO idempotency_keys (tenant, operation, key, fingerprint, job_id, expires_at)
VALUES (?1, 'create_job', ?2, ?3, ?4, ?5)`

// qActiveLeases counts a queue's unexpired leases, for its concurrency
// limit.
const qActiveLeases = `
SELECT count(*) FROM jobs INDEXED BY jobs_leased_idx
WHERE state = 'leased' AND lease_expires_at > ?3 AND tenant = ?1 AND queue = ?2`

// qActiveKeyLeases counts a queue's unexpired leases by concurrency key,
// for its per-key limit.
const qActiveKeyLeases = `
SELECT concurrency_key, count(*) FROM jobs INDEXED BY jobs_leased_idx
WHERE state = 'leased' AND lease_expires_at > ?3 AND tenant = ?1 AND queue = ?2 AND concurrency_key <> ''
GROUP BY concurrency_key`

// qRateStarts reads the starts of a queue's rate window ?3, by key.
const qRateStarts = `SELECT key, starts FROM rate_windows WHERE tenant = ?1 AND queue = ?2 AND window_start = ?3`

// qAddRateStarts adds ?5 starts of key ?4 to the queue's window ?3;
// qDropRateWindows deletes the queue's windows before ?3.
const (
	qAddRateStarts = `INSERT INTO rate_windows (tenant, queue, window_start, key, starts) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (tenant, queue, window_start, key) DO UPDATE SET starts = starts + excluded.starts`
	qDropRateWindows = `DELETE FROM rate_windows WHERE tenant = ?1 AND queue = ?2 AND window_start < ?3`
)

// qClaimCandidates lists up to ?4 claimable jobs of one queue in claim
// order, walking jobs_claim_idx: its predicate is repeated verbatim, which
// SQLite requires before it uses a partial index, and INDEXED BY turns a
// plan without it into an error rather than a slow claim.
// Jobs whose dependency's breaker is not closed are skipped (the
// breakers are read once, through their partial index).
const qClaimCandidates = `
SELECT id, priority, available_at, concurrency_key FROM jobs INDEXED BY jobs_claim_idx
WHERE tenant = ?1 AND queue = ?2
  AND state = 'queued' AND cancel_requested = 0
  AND available_at <= ?3
  AND dependency NOT IN (SELECT dependency FROM breakers WHERE tenant = ?1 AND state <> 'closed')
ORDER BY priority DESC, available_at, id
LIMIT ?4`

// qClaimProbeCandidates is qClaimCandidates for the jobs of one
// dependency (?5) only: the half-open probes.
const qClaimProbeCandidates = `
SELECT id, priority, available_at, concurrency_key FROM jobs INDEXED BY jobs_claim_idx
WHERE tenant = ?1 AND queue = ?2
  AND state = 'queued' AND cancel_requested = 0
  AND available_at <= ?3 AND dependency = ?5
ORDER BY priority DESC, available_at, id
LIMIT ?4`

// leasedColumns are the columns qLeaseJobs returns: the job as scanJob
// reads it (no checkpoint: a first lease has none, and later ones read
// theirs), then the sequence reserved for its LEASED event.
const leasedColumns = `tenant, id, queue, kind, payload, metadata, priority, state,
       attempts, max_attempts, lease_owner, lease_generation, lease_expires_at,
       cancel_requested, created_at, available_at, finished_at, retry_deadline,
       last_error_code, last_error_message, last_error_retryable, result,
       replay_of, replayed_as, abandoned, dependency, leased_at, concurrency_key,
       NULL, NULL, NULL, NULL, NULL, NULL, last_event_seq`

// qLockExpired reads up to ?2 leases that expired at ?1, across tenants,
// earliest first (the single writer needs no row locks).
const qLockExpired = jobSelectColumns + `, j.cancel_reason, j.last_event_seq, j.leased_until, j.leased_seq,
    coalesce(json_array_length(j.attempt_log), 0)` + jobSelectFrom + `
WHERE j.state = 'leased' AND j.lease_expires_at <= ?1
ORDER BY j.lease_expires_at
LIMIT ?2`

// qNextExpiry is the earliest expiry among held leases.
const qNextExpiry = `SELECT min(lease_expires_at) FROM jobs INDEXED BY jobs_leased_idx WHERE state = 'leased'`

// leaseHeld is the lease compare-and-set predicate shared by every
// lease-bound statement: ?1 tenant, ?2 job, ?3 worker, ?4 generation, ?5 now.
const leaseHeld = `
WHERE tenant = ?1 AND id = ?2 AND state = 'leased'
  AND lease_owner = ?3 AND lease_generation = ?4 AND lease_expires_at > ?5`

// qInspectAttempt reads the attempt row of one generation.
const qInspectAttempt = `
SELECT attempt, worker_id, outcome, error_code, error_message, error_retryable FROM job_attempts
WHERE tenant = ?1 AND job_id = ?2 AND generation = ?3`

// qLockLease reads the job only while the token's lease is current.
const qLockLease = `SELECT queue, attempts, max_attempts, retry_deadline, cancel_requested, cancel_reason FROM jobs` + leaseHeld

// qCancelQueued is a client's cancel of a QUEUED job.
const qCancelQueued = `
UPDATE jobs
SET state = 'cancelled', finished_at = ?3, cancel_requested = 1, cancel_reason = ?4
WHERE tenant = ?1 AND id = ?2 AND state = 'queued'`

// qRequestCancelLeased is a client's cancel of a LEASED job: the holder is
// told on its next renew and no new claim takes the job.
const qRequestCancelLeased = `
UPDATE jobs
SET cancel_requested = 1, cancel_reason = ?3
WHERE tenant = ?1 AND id = ?2 AND state = 'leased' AND cancel_requested = 0`

// qLatestCheckpoint is the id of a job's newest checkpoint.
const qLatestCheckpoint = `
SELECT id FROM job_checkpoints WHERE tenant = ?1 AND job_id = ?2 ORDER BY seq DESC LIMIT 1`

// qListCheckpoints is a job's kept checkpoints, newest first.
const qListCheckpoints = `
SELECT id, job_id, phase, state, generation, parent_id, created_at
FROM job_checkpoints WHERE tenant = ?1 AND job_id = ?2 ORDER BY seq DESC`

// qInsertCheckpoint stores a checkpoint under the seq of its event.
const qInsertCheckpoint = `
INSERT INTO job_checkpoints (tenant, id, job_id, seq, phase, state, generation, parent_id, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`

// qTrimCheckpoints keeps only the newest ?3 checkpoints of a job.
const qTrimCheckpoints = `
DELETE FROM job_checkpoints
WHERE tenant = ?1 AND job_id = ?2
  AND seq NOT IN (SELECT seq FROM job_checkpoints WHERE tenant = ?1 AND job_id = ?2 ORDER BY seq DESC LIMIT ?3)`

// effectColumns are the columns scanEffect reads.
const effectColumns = `job_id, effect_key, status, generation, provider_operation_id, result, created_at, updated_at`

// qGetEffect reads one ledger entry.
const qGetEffect = `SELECT ` + effectColumns + ` FROM job_effects WHERE tenant = ?1 AND job_id = ?2 AND effect_key = ?3`

// qListEffects reads a job's ledger by key.
const qListEffects = `SELECT ` + effectColumns + ` FROM job_effects WHERE tenant = ?1 AND job_id = ?2 ORDER BY effect_key`

// qInsertEffect reserves a new key for the current generation.
const qInsertEffect = `
INSERT INTO job_effects (tenant, job_id, effect_key, status, generation, created_at, updated_at)
VALUES (?1, ?2, ?3, 'reserved', ?4, ?5, ?5)
RETURNING ` + effectColumns

// qReReserveEffect takes over a FAILED entry for the current generation.
const qReReserveEffect = `
UPDATE job_effects
SET status = 'reserved', generation = ?4, provider_operation_id = '', result = NULL, updated_at = ?5
WHERE tenant = ?1 AND job_id = ?2 AND effect_key = ?3 AND status = 'failed'
RETURNING ` + effectColumns

// qRecordEffect stores an outcome. A succeeded entry is final and is not
// matched.
const qRecordEffect = `
UPDATE job_effects
SET status = ?4, generation = ?5, provider_operation_id = ?6, result = ?7, updated_at = ?8
WHERE tenant = ?1 AND job_id = ?2 AND effect_key = ?3 AND status <> 'succeeded'
RETURNING ` + effectColumns

// qListDeadJobs pages a tenant's DEAD jobs newest first by finished_at.
// ?4/?5 are the cursor (finished_at, id; ?4 NULL on the first page).
const (
	qListDeadJobs      = jobSelect + qListDeadJobsWhere
	qListDeadJobsBasic = jobSelectBasic + qListDeadJobsWhere
)

const qListDeadJobsWhere = qListDeadJobsConds + qListDeadJobsOrder

// qListDeadJobsConds and qListDeadJobsOrder are qListDeadJobsWhere's
// halves: a filtered list puts its filter (from ?7) between them.
const (
	qListDeadJobsConds = `
WHERE j.tenant = ?1 AND j.state = 'dead'
  AND (?2 = '' OR j.queue = ?2)
  AND (?3 OR j.abandoned = 0)
  AND (?4 IS NULL OR j.finished_at < ?4 OR (j.finished_at = ?4 AND j.id < ?5))`
	qListDeadJobsOrder = `
ORDER BY j.finished_at DESC, j.id DESC
LIMIT ?6`
)

// qMarkReplayed links a dead job to its replay.
const qMarkReplayed = `
UPDATE jobs SET replayed_as = ?3
WHERE tenant = ?1 AND id = ?2 AND state = 'dead' AND replayed_as = '' AND abandoned = 0`

// qMarkAbandoned abandons a dead job.
const qMarkAbandoned = `
UPDATE jobs SET abandoned = 1
WHERE tenant = ?1 AND id = ?2 AND state = 'dead' AND replayed_as = '' AND abandoned = 0`

// policyColumns are the columns scanPolicy reads.
const policyColumns = `queue, max_attempts, initial_delay_ns, max_delay_ns, multiplier, jitter_fraction,
       retryable_error_codes, non_retryable_error_codes, total_retry_deadline_ns,
       default_lease_duration_ns, concurrency_limit, paused, max_lease_duration_ns, limits`

// qGetPolicy reads a stored policy.
const qGetPolicy = `SELECT ` + policyColumns + ` FROM queue_policies WHERE tenant = ?1 AND queue = ?2`

// qListPolicies reads every stored policy of a tenant.
const qListPolicies = `SELECT ` + policyColumns + ` FROM queue_policies WHERE tenant = ?1`

// qUpsertPolicy stores a policy, keeping the paused flag of an existing
// row (?14 is used only for a new row).
const qUpsertPolicy = `
INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns, multiplier,
    jitter_fraction, retryable_error_codes, non_retryable_error_codes, total_retry_deadline_ns,
    default_lease_duration_ns, concurrency_limit, max_lease_duration_ns, paused, updated_at, limits)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
ON CONFLICT (tenant, queue) DO UPDATE SET
    limits = excluded.limits,
    max_attempts = excluded.max_attempts,
    initial_delay_ns = excluded.initial_delay_ns,
    max_delay_ns = excluded.max_delay_ns,
    multiplier = excluded.multiplier,
    jitter_fraction = excluded.jitter_fraction,
    retryable_error_codes = excluded.retryable_error_codes,
    non_retryable_error_codes = excluded.non_retryable_error_codes,
    total_retry_deadline_ns = excluded.total_retry_deadline_ns,
    default_lease_duration_ns = excluded.default_lease_duration_ns,
    concurrency_limit = excluded.concurrency_limit,
    max_lease_duration_ns = excluded.max_lease_duration_ns,
    updated_at = excluded.updated_at
RETURNING ` + policyColumns

// qSetPaused sets the paused flag, creating the row from defaults
// (?3-?13) when the queue has none.
const qSetPaused = `
INSERT INTO queue_policies (tenant, queue, max_attempts, initial_delay_ns, max_delay_ns, multiplier,
    jitter_fraction, retryable_error_codes, non_retryable_error_codes, total_retry_deadline_ns,
    default_lease_duration_ns, concurrency_limit, max_lease_duration_ns, paused, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
ON CONFLICT (tenant, queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
RETURNING ` + policyColumns

// qQueueStats counts one queue's jobs by state; available counts QUEUED jobs
// whose time has come, and the last column is the oldest one's age in
// microseconds (the queue's lag).
const qQueueStats = `
SELECT state, count(*), coalesce(sum(state = 'queued' AND available_at <= ?3), 0),
       coalesce(?3 - min(CASE WHEN state = 'queued' AND available_at <= ?3 THEN available_at END), 0)
FROM jobs WHERE tenant = ?1 AND queue = ?2
GROUP BY state`

// qQueueCounts is qQueueStats for every queue of a tenant.
const qQueueCounts = `
SELECT queue, state, count(*), coalesce(sum(state = 'queued' AND available_at <= ?2), 0),
       coalesce(?2 - min(CASE WHEN state = 'queued' AND available_at <= ?2 THEN available_at END), 0)
FROM jobs WHERE tenant = ?1
GROUP BY queue, state`

// pruneBatch selects (implicitly, as a subquery) the oldest terminal jobs
// finished before ?1, across tenants, at most ?2 of them. Both prune
// statements of one batch use it inside one write transaction, so they see
// the same rows.
const pruneBatch = `
SELECT tenant, id FROM jobs
WHERE finished_at IS NOT NULL AND finished_at < ?1
  AND state IN ('succeeded', 'failed', 'cancelled', 'dead')
ORDER BY finished_at, tenant, id
LIMIT ?2`

// qPruneJobIdempotencyKeys deletes the idempotency records of a prune batch.
const qPruneJobIdempotencyKeys = `
DELETE FROM idempotency_keys WHERE (tenant, job_id) IN (` + pruneBatch + `)`

// qPruneJobs deletes a batch of finished jobs; their events, attempts,
// checkpoints and effects go with them by ON DELETE CASCADE.
const qPruneJobs = `
DELETE FROM jobs WHERE (tenant, id) IN (` + pruneBatch + `)`

// Unique jobs (migration 010).
const (
	// qLiveUniqueHolder reads the live job that holds a unique key.
	qLiveUniqueHolder = jobSelect + `WHERE j.tenant = ?1 AND j.unique_key = ?2 AND j.state IN ('queued', 'leased')`
	// qGetUniqueKey reads a period record.
	qGetUniqueKey = `SELECT job_id, expires_at FROM unique_keys WHERE tenant = ?1 AND key = ?2`
	// qPutUniqueKey records (or takes over) a period record.
	qPutUniqueKey = `INSERT INTO unique_keys (tenant, key, job_id, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at`
	// qPruneUniqueKeys deletes up to ?2 period records that expired at ?1.
	qPruneUniqueKeys = `DELETE FROM unique_keys WHERE (tenant, key) IN (
    SELECT tenant, key FROM unique_keys WHERE expires_at <= ?1 LIMIT ?2)`
)

// qPruneIdempotencyKeys deletes up to ?2 records that expired at ?1.
const qPruneIdempotencyKeys = `
DELETE FROM idempotency_keys WHERE (tenant, operation, key) IN (
    SELECT tenant, operation, key FROM idempotency_keys WHERE expires_at <= ?1 LIMIT ?2)`

// Batched claims and reports (ClaimMany, store.ApplyReports). SQLite has
// no arrays to unnest, so each statement takes its rows as a VALUES list
// of anonymous parameters (multiRow), and every row carries its own
// tenant and, where it changes a lease, its own fence. The CTE's columns
// are listed in the order a row's parameters are bound; padding rows are
// NULL and match nothing (multiRow).
var (
	// qLeaseJobs leases claimed QUEUED jobs, each to its row's worker
	// until its expiry (leased at leased_at): generation + 1, attempts +
	// 1, one event sequence taken by its LEASED event (derived from
	// leased_seq and leased_until, not inserted). It returns
	// leasedColumns of each job it leased, in no particular order.
	qLeaseJobs = newMultiRow(`WITH u(tenant, id, owner, leased_at, expires) AS (VALUES `, 5, `)
UPDATE jobs AS j
SET state = 'leased', lease_owner = u.owner, lease_generation = j.lease_generation + 1,
    attempts = j.attempts + 1, leased_at = u.leased_at, lease_expires_at = u.expires,
    leased_until = u.expires, leased_seq = j.last_event_seq + 1,
    events_stored_through = min(j.events_stored_through, j.last_event_seq),
    last_event_seq = j.last_event_seq + 1
FROM u
WHERE j.tenant = u.tenant AND j.id = u.id AND j.state = 'queued'
RETURNING `+leasedColumns)

	// qLockLeases reads the jobs whose current, unexpired lease is the
	// token of a row (judged at its now), with their latest checkpoints,
	// then cancel_reason, last_event_seq and the row's ord. A row whose
	// fence does not hold returns nothing. (The single writer that reads
	// a row has locked it.)
	qLockLeases = newMultiRow(`WITH r(ord, tenant, id, owner, generation, now) AS (VALUES `, 6, `)`+
		jobSelectColumns+`, j.cancel_reason, j.last_event_seq, r.ord,
    CASE WHEN j.attempt_log IS NOT NULL THEN coalesce(json_extract(j.attempt_log, '$[#-1].rd'), 0)
    WHEN j.events_stored_through = 0 THEN 0
    ELSE coalesce((SELECT a.retry_delay_ns FROM job_attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id
        AND a.generation < j.lease_generation ORDER BY a.generation DESC LIMIT 1), 0) END,
    j.leased_until, j.leased_seq, coalesce(json_array_length(j.attempt_log), 0)
FROM r CROSS JOIN jobs j ON j.tenant = r.tenant AND j.id = r.id`+checkpointJoin+`
WHERE j.state = 'leased' AND j.lease_owner = r.owner AND j.lease_generation = r.generation
  AND j.lease_expires_at > r.now`)

	// qLeaveLeases applies decided transitions (store.Transition) to the
	// jobs whose leases the rows' tokens hold, each fenced at its now
	// (expired = 1, the reaper's: the lease must have expired then;
	// otherwise it must not have): the new state, available_at (NULL:
	// unchanged), finished_at, refund 1 to give the attempt back, the
	// result (stored when succeeded), set_error whether code, message and
	// retryable become the last error, nevents, how many event sequences
	// the transition takes, and record the ended attempt's record
	// (store.AttemptRecord), appended to the attempt log: it is where the
	// transition's events are kept. With spill (store.Leave.Spill) the
	// full log drops its oldest record, which qSpillAttempts moved out
	// just before.
	qLeaveLeases = newMultiRow(`WITH u(tenant, id, owner, generation, now, state, available_at, finished_at,
    refund, result, set_error, code, message, retryable, nevents, expired, record, spill) AS (VALUES `, 18, `)
UPDATE jobs AS j
SET state = u.state, available_at = coalesce(u.available_at, j.available_at), finished_at = u.finished_at,
    lease_expires_at = NULL,
    attempts = j.attempts - u.refund,
    result = CASE WHEN u.state = 'succeeded' THEN u.result ELSE j.result END,
    last_error_code = CASE WHEN u.set_error THEN u.code ELSE j.last_error_code END,
    last_error_message = CASE WHEN u.set_error THEN u.message ELSE j.last_error_message END,
    last_error_retryable = CASE WHEN u.set_error THEN u.retryable ELSE j.last_error_retryable END,
    last_event_seq = j.last_event_seq + u.nevents,
    events_stored_through = min(j.events_stored_through, j.last_event_seq),
    attempt_log = json_insert(CASE WHEN u.spill THEN json_remove(j.attempt_log, '$[0]')
        ELSE coalesce(j.attempt_log, '[]') END, '$[#]', json(u.record))
FROM u
WHERE j.tenant = u.tenant AND j.id = u.id AND j.state = 'leased'
  AND j.lease_owner = u.owner AND j.lease_generation = u.generation
  AND CASE WHEN u.expired THEN j.lease_expires_at <= u.now ELSE j.lease_expires_at > u.now END`)

	// qRenewLeases extends the rows' leases to their expires, each fenced
	// at the instant it was judged at.
	qRenewLeases = newMultiRow(`WITH u(tenant, id, owner, generation, now, expires) AS (VALUES `, 6, `)
UPDATE jobs AS j SET lease_expires_at = u.expires
FROM u
WHERE j.tenant = u.tenant AND j.id = u.id AND j.state = 'leased'
  AND j.lease_owner = u.owner AND j.lease_generation = u.generation AND j.lease_expires_at > u.now`)

	// qSpillAttempts moves the oldest record of the rows' jobs (whose
	// attempt logs are full: store.Leave.Spill) to job_attempts, before
	// qLeaveLeases appends:
	// the record is what is read back; the columns are filled from it
	// (times to the microsecond as julianday resolves them).
	qSpillAttempts = newMultiRow(`WITH u(tenant, id) AS (VALUES `, 2, `), s AS (
    SELECT j.tenant, j.id, json_extract(j.attempt_log, '$[0]') AS r
    FROM u JOIN jobs j ON j.tenant = u.tenant AND j.id = u.id)
INSERT INTO job_attempts (tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at,
    outcome, error_code, error_message, error_retryable, retry_delay_ns, record)
SELECT tenant, id, json_extract(r, '$.n'), json_extract(r, '$.g'), json_extract(r, '$.w'),
    CAST(round((julianday(json_extract(r, '$.c')) - 2440587.5) * 86400000000) AS INTEGER),
    CAST(round((julianday(json_extract(r, '$.f')) - 2440587.5) * 86400000000) AS INTEGER),
    json_extract(r, '$.o'), json_extract(r, '$.ec'), json_extract(r, '$.em'), json_extract(r, '$.er'),
    coalesce(json_extract(r, '$.rd'), 0), r
FROM s`)
)

// statements are the queries prepared once per connection (see prepared).
// Fragments (jobSelect, leaseHeld, claimJobsUpdate, ...) are not statements.
var statements = append([]string{
	qGetJob, qInsertJob, qBumpEventSeq, qInsertEvent, qListJobs, qListJobsBasic, qJobExists, qListEvents,
	qJobHistory, qSpilledAttempts, qAttemptLog,
	qListAttempts, qGetAttempt, qGetIdempotencyKey, qDeleteIdempotencyKey, qInsertIdempotencyKey,
	qActiveLeases, qClaimCandidates, qClaimProbeCandidates, qLockExpired, qNextExpiry,
	qLockLease, qInspectAttempt, qCancelQueued,
	qRequestCancelLeased, qLatestCheckpoint, qListCheckpoints, qInsertCheckpoint, qTrimCheckpoints,
	qGetEffect, qListEffects, qInsertEffect, qReReserveEffect, qRecordEffect, qListDeadJobs, qListDeadJobsBasic,
	qMarkReplayed, qMarkAbandoned, qGetPolicy, qListPolicies, qUpsertPolicy,
	qSetPaused, qQueueStats, qQueueCounts, qCountFinished, qPruneJobIdempotencyKeys, qPruneJobs,
	qPruneIdempotencyKeys, qLiveUniqueHolder, qGetUniqueKey, qPutUniqueKey, qPruneUniqueKeys, qGetBreaker, qGateBreakers, qEnsureBreaker, qUpsertBreaker, qInsertBreakerEvent,
}, multiRowStatements(qLeaseJobs, qLockLeases, qLeaveLeases, qRenewLeases, qSpillAttempts)...)
