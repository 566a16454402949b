package coordinator

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
)

// readyReader is grpc-go's optional connection interface for reads that
// pin no buffer while they wait (internal/transport/readyreader.Reader),
// restated: grpc checks for it by method set.
type readyReader interface {
	ReadOnReady(bufSize int, pool mem.BufferPool) (b *[]byte, n int, err error)
}

func TestLimitListenerReadsWithoutPinning(t *testing.T) {
	t.Parallel()
	l := listenLimited(t, 1)
	client := dial(t, l)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	rr, ok := c.(readyReader)
	if !ok {
		t.Fatalf("an accepted TCP connection (%T) has no ReadOnReady: grpc would pin a read buffer per connection", c)
	}
	pool := mem.DefaultBufferPool()

	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf, n, err := rr.ReadOnReady(16, pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := string((*buf)[:n]); got != "hello" {
		t.Fatalf("read %q, want %q", got, "hello")
	}
	pool.Put(buf)

	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rr.ReadOnReady(16, pool); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	_ = client.Close()
	if _, _, err := rr.ReadOnReady(16, pool); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}
