package bench

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseOwnFlags(t *testing.T) {
	t.Parallel()
	t.Run("idle takes its defaults", func(t *testing.T) {
		t.Parallel()
		f, err := parseOwnFlags(modeIdle, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if f.idle.streams != idleStreamsDefault || f.idle.window != idleWindowDefault || f.idle.settle != idleSettleDefault || f.engine != enginePostgres {
			t.Errorf("defaults: %+v", f)
		}
	})
	t.Run("recovery takes its flags", func(t *testing.T) {
		t.Parallel()
		f, err := parseOwnFlags(modeRecovery, []string{"--jobs", "3", "--lease", "2s", "--engine", "sqlite"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if f.recovery.jobs != 3 || f.recovery.lease != 2*time.Second || f.engine != engineSQLite {
			t.Errorf("parsed: %+v", f)
		}
	})
	t.Run("bad values are all reported", func(t *testing.T) {
		t.Parallel()
		_, err := parseOwnFlags(modeIdle, []string{"--streams", "0", "--window", "10ms", "--engine", "mysql"}, io.Discard)
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{"--streams", "--window", "--engine"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
	t.Run("a lease below a second is refused", func(t *testing.T) {
		t.Parallel()
		if _, err := parseOwnFlags(modeRecovery, []string{"--lease", "500ms"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--lease") {
			t.Errorf("err = %v, want one about --lease", err)
		}
	})
	t.Run("idle has no --jobs", func(t *testing.T) {
		t.Parallel()
		if _, err := parseOwnFlags(modeIdle, []string{"--jobs", "3"}, io.Discard); err == nil {
			t.Error("no error")
		}
	})
}
