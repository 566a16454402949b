//go:build !linux

package coordinator

import "net"

// readyConn is nil off Linux, where grpc-go has no non-pinning reads.
func readyConn(*limitConn) net.Conn { return nil }
