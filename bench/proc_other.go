//go:build !linux

package bench

import (
	"errors"
	"syscall"
)

// childSysProcAttr: outside Linux there is no parent-death signal; workers
// still stop when their stdin closes with the bench.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

const userHZ = 100

type procUsage struct {
	cpuTicks int64
	rssKiB   int64
}

var errNoProc = errors.New("leasehold bench idle reads the coordinator's CPU and memory from /proc: it needs Linux")

func readProcUsage(int) (procUsage, error) { return procUsage{}, errNoProc }

func ensureOpenFiles(int) error { return errNoProc }
