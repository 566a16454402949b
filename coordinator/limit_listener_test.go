package coordinator

import (
	"errors"
	"net"
	"testing"
)

// listenLimited listens on a free loopback port, limited to n connections.
func listenLimited(t *testing.T, n int) *limitListener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(lis, n)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dial opens a client connection to l, closed with the test.
func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestLimitListener(t *testing.T) {
	t.Parallel()

	t.Run("a closed connection frees its slot once, however often it is closed", func(t *testing.T) {
		t.Parallel()
		l := listenLimited(t, 1)
		dial(t, l)
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if len(l.sem) != 1 {
			t.Fatalf("%d slots taken after one Accept, want 1", len(l.sem))
		}
		dial(t, l)
		accepted := make(chan net.Conn, 1)
		go func() {
			c2, err := l.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c2
		}()
		_ = c.Close()
		_ = c.Close()
		c2 := <-accepted
		if c2 == nil {
			return
		}
		if len(l.sem) != 1 {
			t.Fatalf("%d slots taken with one connection open after a double close, want 1", len(l.sem))
		}
		_ = c2.Close()
		if len(l.sem) != 0 {
			t.Fatalf("%d slots taken with no connection open, want 0", len(l.sem))
		}
	})

	t.Run("Close ends an Accept that waits for a slot", func(t *testing.T) {
		t.Parallel()
		l := listenLimited(t, 1)
		dial(t, l)
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		done := make(chan error, 1)
		go func() {
			_, err := l.Accept()
			done <- err
		}()
		_ = l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}
