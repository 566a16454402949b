//go:build !linux

package benchmark

import "syscall"

// childSysProcAttr: outside Linux there is no parent-death signal; workers
// still stop when their stdin closes with the bench.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
