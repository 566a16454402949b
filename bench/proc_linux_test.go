package bench

import (
	"os"
	"testing"
)

func TestReadProcUsage(t *testing.T) {
	t.Parallel()
	u, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.rssKiB <= 0 || u.cpuTicks < 0 {
		t.Errorf("usage of this process: %+v", u)
	}
}

func TestEnsureOpenFiles(t *testing.T) {
	t.Parallel()
	if err := ensureOpenFiles(10); err != nil {
		t.Error(err)
	}
	if err := ensureOpenFiles(1 << 40); err == nil {
		t.Error("no error for 2^40 files")
	}
}
