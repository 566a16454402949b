package coordinator

import (
	"net"
	"sync"
)

// limitListener holds at most n accepted connections open at once: Accept
// waits for a slot, and closing a connection frees its slot (the semantics
// of netutil.LimitListener).
//
// It replaces netutil.LimitListener for memory. grpc-go reads an idle
// connection without pinning a read buffer — it takes one from a pool only
// when the socket is readable — when the connection is a plain
// *net.TCPConn or implements grpc's optional ReadOnReady method
// (internal/transport/readyreader.Reader); netutil's wrapper is neither,
// so every connection held its own 32 KiB bufio.Reader (about 4.6 KiB of
// resident memory per idle worker connection in `leasehold bench idle`).
// The connections of this listener implement ReadOnReady where the
// platform allows it (readyConn). Over TLS grpc reads the TLS connection
// through a bufio.Reader either way.
type limitListener struct {
	net.Listener
	sem       chan struct{} // one value per open connection
	closeOnce sync.Once
	done      chan struct{} // closed by Close
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		// Closed: the inner Accept fails at once. A spurious connection
		// from a buggy listener is closed, not held without a slot.
		for {
			c, err := l.Listener.Accept()
			if err != nil {
				return nil, err
			}
			_ = c.Close() // never served; nothing to report
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	lc := &limitConn{Conn: c, release: func() { <-l.sem }}
	if rc := readyConn(lc); rc != nil {
		return rc, nil
	}
	return lc, nil
}

// Close closes the inner listener and ends Accepts waiting for a slot;
// safe twice.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn frees its listener slot when it is first closed.
type limitConn struct {
	net.Conn
	releaseOnce sync.Once
	release     func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(c.release)
	return err
}
