// Package txcount counts the transactions clients of PostgreSQL end, on
// the wire: a TCP proxy that reads the server's messages as it relays
// them. Tests and the idle benchmark use it to measure what a system asks
// of the database, apart from what PostgreSQL does by itself.
package txcount

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP proxy in front of PostgreSQL that counts the
// transactions its clients end. Point a system under test at URL, and
// Transactions says how many transactions it asked PostgreSQL for: each
// ReadyForQuery the server sends with the status "idle" ('I') ends one —
// an autocommit statement, a COMMIT, a pipeline's Sync, a prepare, an
// empty ping, and the startup of a connection alike (a transaction that
// failed counts too: this is an upper bound on commits).
//
// Why not pg_stat_database.xact_commit: it also counts the transactions
// PostgreSQL runs by itself in a client's idle backend, for reasons the
// client has no part in. Each idle backend commits an empty transaction to
// catch up with the shared invalidation queue whenever other sessions of
// the cluster (in any database) have queued half of it with catalog
// changes, and a LISTEN backend commits one to read the notification
// queue whenever other databases' NOTIFY traffic has left it a few pages
// behind. On a server shared with tests that create and drop schemas and
// databases, that measured several commits a second per backend, counted
// whenever the backend next reports its statistics (a LISTEN backend that
// runs no statement: only when it exits); none of it sends a
// ReadyForQuery.
type Proxy struct {
	// URL is the database URL with its host and port replaced by the
	// proxy's (and sslmode=disable: the proxy reads the server's messages).
	URL string

	target string
	ln     net.Listener
	n      atomic.Int64
	wg     sync.WaitGroup

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// Start starts a proxy to the server of databaseURL. Close stops it.
func Start(databaseURL string) (*Proxy, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, errors.New("txcount: the database URL is not a valid URL")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Proxy{target: u.Host, ln: ln, conns: make(map[net.Conn]struct{})}
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	c.URL = u.String()
	c.wg.Go(c.accept)
	return c, nil
}

// Transactions returns how many transactions the proxied clients ended so
// far.
func (c *Proxy) Transactions() int64 { return c.n.Load() }

func (c *Proxy) accept() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close() // the client sees the refusal as a closed connection
			continue
		}
		if !c.track(client, server) {
			return
		}
		c.wg.Go(func() {
			_, _ = io.Copy(server, client) // ends when either side closes
			_ = server.Close()
		})
		c.wg.Go(func() {
			_ = c.relay(client, server)
			_ = client.Close()
			c.untrack(client, server)
		})
	}
}

// relay copies the server's messages to the client, counting the
// ReadyForQuery messages with the idle status. Every server message is a
// type byte and a length that counts itself (there is no SSL or GSS
// response to expect: the URL says sslmode=disable).
func (c *Proxy) relay(client, server net.Conn) error {
	r := bufio.NewReader(server)
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 {
			return errors.New("txcount: malformed server message")
		}
		if _, err := client.Write(head[:]); err != nil {
			return err
		}
		if head[0] == 'Z' && n == 1 {
			status, err := r.ReadByte()
			if err != nil {
				return err
			}
			if status == 'I' {
				c.n.Add(1)
			}
			if _, err := client.Write([]byte{status}); err != nil {
				return err
			}
			continue
		}
		if _, err := io.CopyN(client, r, n); err != nil {
			return err
		}
	}
}

func (c *Proxy) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		for _, conn := range conns {
			_ = conn.Close()
		}
		return false
	}
	for _, conn := range conns {
		c.conns[conn] = struct{}{}
	}
	return true
}

func (c *Proxy) untrack(conns ...net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range conns {
		delete(c.conns, conn)
	}
}

// Close stops accepting, closes every proxied connection and waits for
// the copying goroutines. Safe twice.
func (c *Proxy) Close() {
	_ = c.ln.Close()
	c.mu.Lock()
	c.closed = true
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
