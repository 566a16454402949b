package coordinator

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/store"
)

func TestWatchHubWakesOnlyTheChangedJobsWatchers(t *testing.T) {
	t.Parallel()
	h := newWatchHub(10, 10, nil, "c")
	a, b := store.JobRef{Tenant: "t", ID: "a"}, store.JobRef{Tenant: "t", ID: "b"}
	wa, err := h.add(a, "conn-1")
	if err != nil {
		t.Fatal(err)
	}
	wb, err := h.add(b, "conn-1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := h.add(store.JobRef{Tenant: "u", ID: "a"}, "conn-2")
	if err != nil {
		t.Fatal(err)
	}
	h.notify("t", "a")
	h.notify("t", "a") // a second change before the watcher woke adds nothing
	if len(wa.wake) != 1 || len(wb.wake) != 0 || len(other.wake) != 0 {
		t.Fatalf("pending wake-ups a=%d b=%d other tenant's a=%d; want 1, 0, 0", len(wa.wake), len(wb.wake), len(other.wake))
	}
	h.wakeAll()
	if len(wb.wake) != 1 || len(other.wake) != 1 {
		t.Fatal("wakeAll missed a watcher")
	}
	h.remove(wa)
	h.remove(wa) // safe twice
	if h.count() != 2 {
		t.Fatalf("%d watchers after one left, want 2", h.count())
	}
}

func TestWatchHubCaps(t *testing.T) {
	t.Parallel()
	h := newWatchHub(2, 3, nil, "c")
	j := store.JobRef{Tenant: "t", ID: "j"}
	var ws []*watcher
	for _, conn := range []string{"c1", "c1", "c2"} {
		w, err := h.add(j, conn)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	var lim errWatchLimit
	if _, err := h.add(j, "c3"); !errors.As(err, &lim) || lim.perConnection {
		t.Fatalf("a fourth watcher = %v; want the total cap", err)
	}
	h.remove(ws[2])
	if _, err := h.add(j, "c1"); !errors.As(err, &lim) || !lim.perConnection {
		t.Fatalf("a third watcher on c1 = %v; want the per-connection cap", err)
	}
	if _, err := h.add(j, "c3"); err != nil {
		t.Fatalf("a watcher once a slot was freed: %v", err)
	}
}

// The store's changes wake their job's watchers; a Lost signal (changes
// may have been missed) wakes every watcher; the feed ends with the
// subscription.
func TestWatchHubConsumesTheStoresChanges(t *testing.T) {
	t.Parallel()
	h := newWatchHub(10, 10, nil, "c")
	wa, _ := h.add(store.JobRef{Tenant: "t", ID: "a"}, "c")
	wb, _ := h.add(store.JobRef{Tenant: "t", ID: "b"}, "c")
	jobs, lost := make(chan store.JobRef, 1), make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.consume(t.Context(), store.JobChanges{Jobs: jobs, Lost: lost})
	}()
	jobs <- store.JobRef{Tenant: "t", ID: "a"}
	<-wa.wake
	if len(wb.wake) != 0 {
		t.Fatal("a change of a woke b's watcher")
	}
	lost <- struct{}{}
	<-wa.wake
	<-wb.wake
	close(jobs)
	<-done
}
