package worker

import (
	"strings"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	t.Parallel()

	t.Run("defaults fill every zero field and copy the caller's slices", func(t *testing.T) {
		t.Parallel()
		queues := []string{"a"}
		labels := map[string]string{"k": "v"}
		c := Config{Queues: queues, Labels: labels}.WithDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("defaults are invalid: %v", err)
		}
		if c.Capacity != CapacityDefault || c.HeartbeatFraction != HeartbeatFractionDefault ||
			c.ShutdownGrace != ShutdownGraceDefault || c.ReconnectMin != ReconnectMinDefault ||
			c.ReconnectMax != ReconnectMaxDefault || c.Logger == nil {
			t.Fatalf("defaults not applied: %+v", c)
		}
		if !workerIDPattern.MatchString(c.WorkerID) {
			t.Fatalf("default worker id %q is not a valid identity", c.WorkerID)
		}
		c.Queues[0] = "changed"
		c.Labels["k"] = "changed"
		if queues[0] != "a" || labels["k"] != "v" {
			t.Fatal("WithDefaults shares the caller's slice or map")
		}
	})

	t.Run("validate reports every bad field", func(t *testing.T) {
		t.Parallel()
		c := Config{
			WorkerID:          "has space",
			Capacity:          -1,
			LeaseDuration:     time.Millisecond,
			HeartbeatFraction: 1.5,
			ShutdownGrace:     -time.Second,
			ReconnectMin:      time.Second,
			ReconnectMax:      time.Millisecond,
		}
		err := c.Validate()
		if err == nil {
			t.Fatal("invalid config accepted")
		}
		for _, want := range []string{"WorkerID", "Queues is required", "Capacity", "LeaseDuration", "HeartbeatFraction", "ShutdownGrace", "ReconnectMin"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not mention %s: %v", want, err)
			}
		}
	})

	t.Run("New refuses an invalid config instead of panicking", func(t *testing.T) {
		t.Parallel()
		if _, err := New(nil, Config{Queues: []string{"q"}}); err == nil {
			t.Fatal("New accepted a nil connection")
		}
	})
}
