-- +goose Up
-- Fewer writes per job on the hot path (claim, complete, renew).
--
-- Events, attempts, checkpoints and effects lose their foreign keys to
-- jobs. Each row of them is written only by the store, in the transaction
-- that holds its job's row lock, so the key could never fail; checking it
-- cost a lookup and a row lock on jobs for every event written (a quarter
-- of a no-op job's database time), and with a table that grows from empty
-- the cached check plan can degrade to a scan. Retention now deletes a
-- pruned job's rows itself, in the statement that deletes the job.
ALTER TABLE job_events      DROP CONSTRAINT job_events_tenant_job_id_fkey;
ALTER TABLE job_attempts    DROP CONSTRAINT job_attempts_tenant_job_id_fkey;
ALTER TABLE job_checkpoints DROP CONSTRAINT job_checkpoints_tenant_job_id_fkey;
ALTER TABLE job_effects     DROP CONSTRAINT job_effects_tenant_job_id_fkey;

-- Every claim and every finish changes state, so each writes a new version
-- of the row to every index of jobs. Queue statistics count queued and
-- leased jobs through the claim and lease-expiry indexes instead, and
-- terminal jobs by a scan (an operator's occasional question, on a table
-- that retention keeps small).
DROP INDEX jobs_queue_state_idx;

-- Room on each page, so that the updates that change no indexed column
-- (cancel requests, checkpoint and effect event bumps) stay on their page
-- (HOT) instead of writing a new entry in every index.
ALTER TABLE jobs SET (fillfactor = 80);
