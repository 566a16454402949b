//go:build !linux

package measure

import (
	"errors"
	"time"
)

type cpuReading struct {
	machine, postgres, system time.Duration
}

func readCPU(int) (cpuReading, error) {
	return cpuReading{}, errors.New("CPU per job is read from /proc: it needs Linux")
}

type procStat struct{ ppid int }

func readProcStat(string) (procStat, error) {
	return procStat{}, errors.New("/proc is Linux's")
}
