package coordinator

import (
	"errors"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

// readyLimitConn is a limitConn over a socket, with grpc-go's optional
// non-pinning read (see limitListener). grpc-go does the same for a plain
// *net.TCPConn (internal/transport/readyreader, Linux only).
type readyLimitConn struct {
	*limitConn
	raw syscall.RawConn

	// One read at a time: grpc's reader goroutine is the only caller. The
	// state is kept here, and doRead made once, so that a read allocates
	// nothing but its pooled buffer.
	size   int
	pool   mem.BufferPool
	buf    *[]byte
	n      int
	err    error
	doRead func(fd uintptr) bool
}

// readyConn returns c with ReadOnReady when its connection is a socket
// grpc-go would read that way itself, and nil otherwise.
func readyConn(c *limitConn) net.Conn {
	switch c.Conn.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	rc := &readyLimitConn{limitConn: c, raw: raw}
	rc.doRead = func(fd uintptr) bool {
		rc.buf = rc.pool.Get(rc.size)
		rc.n, rc.err = syscall.Read(int(fd), *rc.buf)
		if rc.err != nil {
			rc.pool.Put(rc.buf)
			rc.buf = nil
			// EAGAIN: nothing to read yet; raw.Read waits for the socket
			// to become readable (honouring deadlines) and calls again.
			return !errors.Is(rc.err, syscall.EAGAIN)
		}
		return true
	}
	return rc
}

// ReadOnReady waits until the socket is readable, then reads up to size
// bytes into a buffer from pool, which the caller returns to the pool. It
// is grpc-go's readyreader.Reader.
func (c *readyLimitConn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	c.size, c.pool = size, pool
	err := c.raw.Read(c.doRead)
	buf, n, rerr := c.buf, c.n, c.err
	c.pool, c.buf, c.n, c.err = nil, nil, 0, nil
	switch {
	case err != nil: // closed, or a deadline passed
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	case rerr != nil: // the buffer went back in doRead
		return nil, 0, rerr
	case n == 0:
		pool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, n, nil
}
