package benchmark

import "syscall"

// childSysProcAttr makes the kernel send SIGTERM to a child when the bench
// dies without cleaning up (e.g. SIGKILL), so no coordinator or worker
// outlives it.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
