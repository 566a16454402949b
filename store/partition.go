package store

import (
	"context"
	"fmt"
	"time"
)

// Finished jobs (succeeded, failed, cancelled) are kept in partitions by
// the UTC day their job was created on, read from the UUIDv7 id: its first
// 48 bits are the creation time in milliseconds, so a day is a range of
// ids. An engine without partitions (SQLite) prunes in batches only.

// PartitionMaintainer is implemented by engines that keep finished jobs in
// day partitions. The retention service calls it before Prune.
type PartitionMaintainer interface {
	MaintainPartitions(ctx context.Context, p MaintainPartitionsParams) (MaintainPartitionsResult, error)
}

// MaintainPartitionsParams configures one maintenance pass.
type MaintainPartitionsParams struct {
	// FinishedBefore is the retention cutoff; zero drops nothing.
	FinishedBefore time.Time
	// Now is the clock the days ahead count from; zero: the store's clock.
	Now time.Time
	// AheadDays is how many days after Now's get a partition in advance;
	// zero: PartitionAheadDaysDefault.
	AheadDays int
	// LockTimeout bounds each wait for the lock a detach needs; zero:
	// PartitionLockTimeoutDefault.
	LockTimeout time.Duration
}

// MaintainPartitionsResult reports one maintenance pass.
type MaintainPartitionsResult struct {
	// Skipped: another coordinator holds the maintenance lock.
	Skipped bool
	// Created and Dropped count partitions.
	Created, Dropped int
	// DroppedJobs is the planner's row estimate of the dropped partitions
	// (counting them exactly would read them).
	DroppedJobs int64
	// SweptRows counts the rows hanging off dropped jobs (events,
	// attempts, checkpoints, effects) deleted after the drops.
	SweptRows int64
}

// Bounds of the partition maintenance.
const (
	PartitionAheadDaysDefault   = 3
	PartitionAheadDaysMax       = 31
	PartitionLockTimeoutDefault = 200 * time.Millisecond
	PartitionLockTimeoutMax     = 10 * time.Second
)

// ValidateMaintainPartitions checks p's bounds.
func ValidateMaintainPartitions(p MaintainPartitionsParams) error {
	if p.AheadDays < 0 || p.AheadDays > PartitionAheadDaysMax {
		return Invalid("ahead_days", fmt.Sprintf("must be between 0 and %d", PartitionAheadDaysMax))
	}
	if p.LockTimeout < 0 || p.LockTimeout > PartitionLockTimeoutMax {
		return Invalid("lock_timeout", fmt.Sprintf("must be between 0 and %s", PartitionLockTimeoutMax))
	}
	return nil
}

// DonePartition is the partition of finished jobs created on one UTC day.
type DonePartition struct {
	// Day is the partition's day, at 00:00 UTC.
	Day time.Time
}

// DonePartitionOf is the partition of the day t falls on (UTC).
func DonePartitionOf(t time.Time) DonePartition {
	t = t.UTC()
	return DonePartition{Day: time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)}
}

// ParseDonePartition reads a partition from its table name; ok is false
// for any other name (the default partition among them).
func ParseDonePartition(name string) (DonePartition, bool) {
	const prefix = "jobs_done_"
	if len(name) != len(prefix)+8 || name[:len(prefix)] != prefix {
		return DonePartition{}, false
	}
	d, err := time.Parse("20060102", name[len(prefix):])
	if err != nil {
		return DonePartition{}, false
	}
	return DonePartition{Day: d}, true
}

// Name is the partition's table name.
func (p DonePartition) Name() string { return "jobs_done_" + p.Day.Format("20060102") }

// From and To are the partition's id bounds, From inclusive: the UUIDv7
// prefixes (8 hex digits, a dash, 4 hex digits) of its day's first
// millisecond and of the next day's.
func (p DonePartition) From() string { return uuidv7Prefix(p.Day) }

// To is the exclusive upper id bound (see From).
func (p DonePartition) To() string { return uuidv7Prefix(p.Day.AddDate(0, 0, 1)) }

func uuidv7Prefix(t time.Time) string {
	ms := t.UnixMilli()
	return fmt.Sprintf("%08x-%04x", uint64(ms)>>16, uint64(ms)&0xffff)
}

// Expired reports whether the partition may be dropped at cutoff: every
// job in it was created before cutoff (its day has ended by then), and
// newestFinish, the latest finished_at in it (zero: empty), is before
// cutoff. A job that finished long after its creation day keeps its whole
// day until it too has been finished for the retention.
func (p DonePartition) Expired(cutoff, newestFinish time.Time) bool {
	if cutoff.IsZero() || p.Day.AddDate(0, 0, 1).After(cutoff) {
		return false
	}
	return newestFinish.Before(cutoff)
}
