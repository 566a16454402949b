package main

// Capturing a job's program's output: the result from standard output,
// the error message from the tail of standard error, and one shared stderr
// for every child and the log.

import (
	"io"
	"slices"
	"strings"
	"sync"
)

// boundedBuffer keeps the first limit bytes written and counts the rest,
// always accepting the write so the child never blocks on a full pipe.
type boundedBuffer struct {
	limit int
	mu    sync.Mutex // guards buf and total: os/exec's copier writes, handle reads
	buf   []byte
	total int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	b.total += len(p)
	return len(p), nil
}

func (b *boundedBuffer) truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > b.limit
}

func (b *boundedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}

// tailBuffer keeps the last limit bytes written.
type tailBuffer struct {
	limit int
	mu    sync.Mutex // guards buf
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// message is the tail as an error message, or a note that there was none.
func (t *tailBuffer) message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(t.buf), "\uFFFD"))
	if s == "" {
		return "no output on stderr"
	}
	return s
}

// lockedWriter serialises writes from concurrent children and the logger.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
