package store

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestDonePartitionBoundsHoldItsDaysIDs: a UUIDv7 made at any instant of a
// day sorts inside its day's bounds and outside the neighbours'.
func TestDonePartitionBoundsHoldItsDaysIDs(t *testing.T) {
	day := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	p := DonePartitionOf(day.Add(13 * time.Hour))
	if p.Name() != "jobs_done_20261206" || !p.Day.Equal(day) {
		t.Fatalf("partition %s of %s", p.Name(), p.Day)
	}
	if q, ok := ParseDonePartition(p.Name()); !ok || !q.Day.Equal(day) {
		t.Fatalf("parse %s: %v %v", p.Name(), q, ok)
	}
	for _, name := range []string{"jobs_done_default", "jobs_done_2026120", "jobs_live", "jobs_done_20261306"} {
		if _, ok := ParseDonePartition(name); ok {
			t.Fatalf("%s parsed as a day partition", name)
		}
	}
	for _, at := range []time.Time{day, day.Add(time.Millisecond), day.Add(12 * time.Hour), day.Add(24*time.Hour - time.Millisecond)} {
		id := uuidAt(t, at)
		if id < p.From() || id >= p.To() {
			t.Fatalf("id %s made at %s is outside [%s, %s)", id, at, p.From(), p.To())
		}
	}
	if id := uuidAt(t, day.Add(-time.Millisecond)); id >= p.From() {
		t.Fatalf("id %s of the day before sorts inside %s", id, p.Name())
	}
	if id := uuidAt(t, day.Add(24*time.Hour)); id < p.To() {
		t.Fatalf("id %s of the next day sorts inside %s", id, p.Name())
	}
}

// uuidAt is a UUIDv7 whose time is at.
func uuidAt(t *testing.T, at time.Time) string {
	t.Helper()
	u := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i)))
	}
	return strings.ToLower(u.String())
}

// TestDonePartitionExpiry: a day goes once it ended before the cutoff and
// its newest finish is before the cutoff too.
func TestDonePartitionExpiry(t *testing.T) {
	p := DonePartitionOf(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	cutoff := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		cutoff, newest time.Time
		want           bool
	}{
		{cutoff, time.Time{}, true},
		{cutoff, cutoff.Add(-time.Second), true},
		{cutoff, cutoff, false},
		{cutoff, cutoff.Add(time.Hour), false},
		{p.Day.Add(12 * time.Hour), time.Time{}, false}, // the day has not ended by the cutoff
		{time.Time{}, time.Time{}, false},               // no cutoff: keep everything
	} {
		if got := p.Expired(c.cutoff, c.newest); got != c.want {
			t.Errorf("Expired(%s, %s) = %v, want %v", c.cutoff, c.newest, got, c.want)
		}
	}
	if err := ValidateMaintainPartitions(MaintainPartitionsParams{AheadDays: PartitionAheadDaysMax + 1}); err == nil {
		t.Error("ahead days past the maximum accepted")
	}
	if err := ValidateMaintainPartitions(MaintainPartitionsParams{LockTimeout: -time.Second}); err == nil {
		t.Error("a negative lock timeout accepted")
	}
}
