package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// childSysProcAttr makes the kernel send SIGTERM to a child when the bench
// dies without cleaning up (e.g. SIGKILL), so no coordinator or worker
// outlives it.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// userHZ is the unit of the CPU times in /proc/PID/stat: the kernel
// reports them in USER_HZ, which is 100 on every Linux architecture Go
// supports (it is part of the ABI, unlike CONFIG_HZ).
const userHZ = 100

// procUsage is what /proc says of a process at one instant.
type procUsage struct {
	// cpuTicks is utime + stime, in 1/userHZ seconds.
	cpuTicks int64
	// rssKiB is VmRSS.
	rssKiB int64
}

// readProcUsage reads pid's CPU time and resident set size.
func readProcUsage(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name (field 2) is in parentheses and may contain spaces;
	// the fields after the last ')' start with field 3 (state), so utime
	// and stime (fields 14 and 15) are at 11 and 12.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	u.cpuTicks = utime + stime
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			// "VmRSS:	  123456 kB"
			kb := strings.TrimSuffix(strings.TrimSpace(rest), " kB")
			if u.rssKiB, err = strconv.ParseInt(strings.TrimSpace(kb), 10, 64); err != nil {
				return u, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, rest)
			}
			return u, nil
		}
	}
	return u, fmt.Errorf("/proc/%d/status has no VmRSS line", pid)
}

// ensureOpenFiles makes sure this process may hold n more descriptors,
// raising the soft RLIMIT_NOFILE up to the hard limit if needed. (Go
// raises it at start-up already; this only says so plainly when even the
// hard limit is too low.)
func ensureOpenFiles(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	need := uint64(n) + openFilesSpare
	if lim.Cur >= need {
		return nil
	}
	if lim.Max < need {
		return fmt.Errorf("%d streams need about %d open files, but the hard limit (ulimit -Hn) is %d", n, need, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return nil
}
