package measure

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of CPU times in /proc (USER_HZ): 100 on every Linux
// architecture Go supports; it is part of the ABI, unlike CONFIG_HZ.
const userHZ = 100

const tick = time.Second / userHZ

// cpuReading is the CPU time spent up to one instant by the machine, by
// PostgreSQL's processes and by the system under test.
type cpuReading struct {
	// machine is every CPU's busy time (/proc/stat without idle and
	// iowait), whoever spent it.
	machine time.Duration
	// postgres is the postmaster's, its live children's and its exited
	// children's time: a backend that exits is reaped by the postmaster,
	// whose cutime and cstime then hold its time, so a window that ends
	// after the system's backends closed still counts them.
	postgres time.Duration
	// system is this process's and its children's time, live or reaped:
	// the system under test runs here or in processes this one started
	// (River's client; Leasehold's coordinator and workers, and the
	// producer here).
	system time.Duration
}

// readCPU reads the three clocks; postmaster is PostgreSQL's main process.
func readCPU(postmaster int) (cpuReading, error) {
	var r cpuReading
	var err error
	if r.machine, err = machineBusy(); err != nil {
		return r, err
	}
	if r.postgres, err = treeTime(postmaster); err != nil {
		return r, fmt.Errorf("PostgreSQL's processes (is the server on this machine?): %w", err)
	}
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return r, fmt.Errorf("getrusage: %w", err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		return r, fmt.Errorf("getrusage: %w", err)
	}
	live, err := childrenTime(os.Getpid())
	if err != nil {
		return r, err
	}
	r.system = rusageTime(self) + rusageTime(children) + live
	return r, nil
}

func rusageTime(u syscall.Rusage) time.Duration {
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// machineBusy sums /proc/stat's first line without idle and iowait.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice];
	// guest time is already inside user and nice.
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", v, err)
		}
		busy += n
	}
	return time.Duration(busy) * tick, nil
}

// procStat is what /proc/PID/stat says of a process's parent and times.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // ticks
}

func (s procStat) total() time.Duration {
	return time.Duration(s.utime+s.stime+s.cutime+s.cstime) * tick
}

func readProcStat(path string) (procStat, error) {
	var s procStat
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// after the last ')' come field 3 (state), 4 (ppid), … 14-17 (utime,
	// stime, cutime, cstime).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s, fmt.Errorf("%s: no ')'", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return s, fmt.Errorf("%s: %d fields after the name", path, len(f))
	}
	n := make([]int64, 0, 5)
	for _, v := range []string{f[1], f[11], f[12], f[13], f[14]} {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("%s: %q: %w", path, v, err)
		}
		n = append(n, x)
	}
	s.ppid = int(n[0])
	s.utime, s.stime, s.cutime, s.cstime = n[1], n[2], n[3], n[4]
	return s, nil
}

// treeTime is pid's time, its reaped children's, and its live children's
// (with theirs).
func treeTime(pid int) (time.Duration, error) {
	s, err := readProcStat(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	kids, err := childrenTime(pid)
	if err != nil {
		return 0, err
	}
	return s.total() + kids, nil
}

// childrenTime sums the times of pid's live children, each with its own
// reaped children. A child that exits during the scan is skipped: its
// time moves to pid's cutime, which the caller reads.
func childrenTime(pid int) (time.Duration, error) {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, p := range paths {
		s, err := readProcStat(p)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if s.ppid == pid {
			sum += s.total()
		}
	}
	return sum, nil
}
