package postgres

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, tenant, jobID string) (*store.Job, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(jobID); err != nil {
		return nil, err
	}
	job, err := getJob(ctx, s.pool, tenant, jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readError(ctx, "get_job", err)
	}
	return job, nil
}

// ListJobs implements store.Store: newest first (created_at desc, id desc),
// keyset-paged with an opaque cursor.
func (s *Store) ListJobs(ctx context.Context, p store.ListJobsParams) (*store.JobPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if p.Queue != "" {
		if err := validateQueue("queue", p.Queue); err != nil {
			return nil, err
		}
	}
	if p.Kind != "" {
		if err := validateQueue("kind", p.Kind); err != nil {
			return nil, err
		}
	}
	states := make([]string, 0, len(p.States))
	for _, st := range p.States {
		switch st {
		case store.JobStateQueued, store.JobStateLeased, store.JobStateSucceeded,
			store.JobStateFailed, store.JobStateCancelled, store.JobStateDead:
			states = append(states, string(st))
		default:
			return nil, store.Invalid("states", fmt.Sprintf("unknown state %q", st))
		}
	}
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	limit, err := store.PageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var afterTime, afterID any
	if p.Cursor != "" {
		c, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		afterTime, afterID = c.at, c.id
	}
	q := qListJobs
	if p.View == store.JobViewBasic {
		q = qListJobsBasic
	}
	args := []any{p.Tenant, p.Queue, p.Kind, states, afterTime, afterID, limit + 1}
	if !p.Filter.IsZero() {
		var cond string
		cond, args = filterSQL(p.Filter, args)
		cols := jobColumns
		if p.View == store.JobViewBasic {
			cols = jobColumnsBasic
		}
		q = `SELECT ` + cols + qListJobsWhere + ` AND ` + cond + qListJobsOrder
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.readError(ctx, "list_jobs", err)
	}
	recs, more, err := collectPage(rows, limit, p.MaxBytes)
	if err != nil {
		return nil, s.readError(ctx, "list_jobs", err)
	}
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, r.job.ID)
	}
	checkpoints, err := latestCheckpointsView(ctx, s.pool, p.Tenant, ids, p.View)
	if err != nil {
		return nil, s.readError(ctx, "list_jobs", err)
	}
	page := &store.JobPage{}
	for _, r := range recs {
		r.job.Checkpoint = checkpoints[r.job.ID]
		page.Jobs = append(page.Jobs, r.job)
	}
	// The checkpoints count too: trim again with them.
	if n := store.FitPage(page.Jobs, p.MaxBytes, store.JobSize); n < len(page.Jobs) {
		page.Jobs, more = page.Jobs[:n], true
	}
	if more {
		last := page.Jobs[len(page.Jobs)-1]
		page.NextCursor = encodeCursor(cursor{at: last.CreatedAt, id: last.ID})
	}
	return page, nil
}

// CountJobs implements store.Store: a count, cut at Limit, and a sample of
// the newest matching jobs, each in one statement.
func (s *Store) CountJobs(ctx context.Context, p store.CountJobsParams) (store.JobCount, error) {
	if err := store.ValidateCount(p); err != nil {
		return store.JobCount{}, err
	}
	var out store.JobCount
	var limit any // NULL: LIMIT ALL
	if p.Limit > 0 {
		limit = p.Limit + 1
	}
	cond, args := filterSQL(p.Filter, []any{p.Tenant, limit})
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(qCountJobs, cond), args...).Scan(&out.Count); err != nil {
		return store.JobCount{}, s.readError(ctx, "count_jobs", err)
	}
	if p.Limit > 0 && out.Count > p.Limit {
		out.Count, out.Capped = p.Limit, true
	}
	if p.SampleSize == 0 || out.Count == 0 {
		return out, nil
	}
	cond, args = filterSQL(p.Filter, []any{p.Tenant, p.SampleSize})
	rows, err := s.pool.Query(ctx, fmt.Sprintf(qSampleJobs, cond), args...)
	if err != nil {
		return store.JobCount{}, s.readError(ctx, "count_jobs", err)
	}
	recs, _, err := collectPage(rows, p.SampleSize, 0)
	if err != nil {
		return store.JobCount{}, s.readError(ctx, "count_jobs", err)
	}
	for _, r := range recs {
		out.Sample = append(out.Sample, r.job)
	}
	return out, nil
}

// collectPage reads the jobs of one list page from rows (a query with a
// LIMIT of limit+1): at most limit, and no more than the byte budget
// maxBytes holds. It stops reading at the first row that does not belong
// on the page, so a page of large jobs holds only what it returns, and
// more reports that such a row exists.
func collectPage(rows pgx.Rows, limit, maxBytes int) (_ []*jobRecord, more bool, _ error) {
	defer rows.Close()
	budget := store.NewPageBudget(maxBytes)
	var out []*jobRecord
	for rows.Next() {
		if len(out) == limit {
			return out, true, nil
		}
		r, err := scanJob(rows)
		if err != nil {
			return nil, false, err
		}
		if !budget.Take(store.JobSize(r.job)) {
			return out, true, nil
		}
		out = append(out, r)
	}
	return out, false, rows.Err()
}

// cursor is the keyset position after which a page starts: the sort time
// (created_at for jobs, finished_at for dead jobs) and id of the last row of
// the previous page.
type cursor struct {
	at time.Time
	id string
}

// cursorVersion is the first byte of an encoded cursor, so the format can
// change without misreading old tokens.
const cursorVersion = 1

// encodeCursor is base64url(version, unix microseconds as 8 big-endian
// bytes, id).
func encodeCursor(c cursor) string {
	b := make([]byte, 9, 9+len(c.id))
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:], uint64(c.at.UnixMicro()))
	b = append(b, c.id...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor parses a page token. Anything it did not produce is
// store.ErrInvalid, never a panic or a database error.
func decodeCursor(s string) (cursor, error) {
	bad := store.Invalid("cursor", "is not a page token returned by this list; start again without one")
	if len(s) > 512 {
		return cursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 10 || b[0] != cursorVersion {
		return cursor{}, bad
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	// Beyond what PostgreSQL's timestamptz holds.
	if at.Year() < 1 || at.Year() > 9999 {
		return cursor{}, bad
	}
	id := string(b[9:])
	if err := store.ValidateText("cursor", id, store.NameMaxLen, true); err != nil {
		return cursor{}, bad
	}
	return cursor{at: at, id: id}, nil
}
