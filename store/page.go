package store

// JobView says how much of each job a list reads. The API's
// JOB_VIEW_BASIC and JOB_VIEW_FULL map onto it.
type JobView int

const (
	// JobViewFull is every field, as GetJob returns it. It is the zero
	// value so that the store's own callers see whole jobs.
	JobViewFull JobView = iota
	// JobViewBasic leaves out the payload, the result and the checkpoint's
	// state: the fields that may each be PayloadMaxBytes. The rest of a
	// job is small (its metadata is bounded by MetadataMaxEntries), so a
	// BASIC page of ListLimitMax jobs stays a few megabytes whatever the
	// jobs carry.
	JobViewBasic
)

// PageBytesDefault is the byte budget of one list page when a caller names
// none: a page whose jobs would exceed it ends early, with a cursor. 2 MiB
// keeps a page well under grpc-go's default 4 MiB receive limit, with room
// for a first job that alone is over the budget (a page always holds at
// least one job, so that paging makes progress).
const PageBytesDefault = 2 << 20

// jobFixedBytes is what JobSize counts for a job's fixed-size fields and
// short strings (ids, names, timestamps, error code, lease owner) and
// their encoding: an over-estimate, so that pages err on the small side.
const jobFixedBytes = 1024

// JobSize estimates the encoded size of a job in a list page: its
// variable-length fields plus jobFixedBytes.
func JobSize(j *Job) int {
	n := jobFixedBytes + len(j.Payload) + len(j.Result)
	for k, v := range j.Metadata {
		n += len(k) + len(v) + 8
	}
	if j.LastError != nil {
		n += len(j.LastError.Code) + len(j.LastError.Message)
	}
	if c := j.Checkpoint; c != nil {
		n += len(c.ID) + len(c.Phase) + len(c.State) + len(c.ParentID) + 64
	}
	return n
}

// DeadJobSize is JobSize plus the dead job's attempt history.
func DeadJobSize(d *DeadJob) int {
	n := JobSize(d.Job)
	for _, a := range d.Attempts {
		n += 128 + len(a.WorkerID)
		if a.Error != nil {
			n += len(a.Error.Code) + len(a.Error.Message)
		}
	}
	return n
}

// PageBudget counts a page's bytes as rows are read, so an engine can stop
// reading (and holding) rows once the page is full. The zero value is not
// ready: use NewPageBudget.
type PageBudget struct {
	left int
	n    int
}

// NewPageBudget returns a budget of maxBytes; 0 is PageBytesDefault.
func NewPageBudget(maxBytes int) *PageBudget {
	if maxBytes <= 0 {
		maxBytes = PageBytesDefault
	}
	return &PageBudget{left: maxBytes}
}

// Take counts an item of size bytes and reports whether it belongs on the
// page: the first item always does; a later one only within the budget.
// Once Take said false the page is full.
func (b *PageBudget) Take(size int) bool {
	if b.n > 0 && size > b.left {
		b.left = 0
		return false
	}
	b.n++
	b.left -= size
	return true
}

// FitPage returns how many of items, in order, fit a budget of maxBytes
// (0: PageBytesDefault) as measured by size: at least one when there are
// any. Engines that add to rows after reading them (checkpoints, attempt
// histories) trim the page with it once more.
func FitPage[T any](items []T, maxBytes int, size func(T) int) int {
	b := NewPageBudget(maxBytes)
	for i, it := range items {
		if !b.Take(size(it)) {
			return i
		}
	}
	return len(items)
}
