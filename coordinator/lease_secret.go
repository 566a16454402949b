package coordinator

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// A lease's secret is what makes its token unforgeable: anyone who may
// read a job sees its id, lease generation and owner, but only the
// claimer receives the secret, and every lease-bound call must present it.
//
// The secret is HMAC-SHA256 of the lease's (job id, generation, worker id)
// under a key kept in the database (store.LeaseKey), so any coordinator of
// the database can check it without a read, and nothing per lease is
// stored. Each claim bumps the generation, so each claim gets a new secret;
// without the key the secret is indistinguishable from 256 random bits.

// errLeaseSecret: a token's secret is not its lease's.
var errLeaseSecret = errors.New("lease secret mismatch")

// leaseKeyTimeout bounds reading (or storing) the key at New.
const leaseKeyTimeout = 10 * time.Second

// leaseSigner signs and checks lease secrets with the store's key.
type leaseSigner struct {
	key []byte
	// macs keeps keyed HMACs for reuse (*leaseMAC): every pushed lease is
	// signed and every report verified, and a new HMAC costs its key
	// schedule and allocations each time. Nil (a signer built without
	// newSigner): a new HMAC per call.
	macs *sync.Pool
}

// leaseMAC is a keyed HMAC and the buffer a token is encoded into.
type leaseMAC struct {
	h   hash.Hash
	buf []byte
}

// newSigner is a signer for key.
func newSigner(key []byte) leaseSigner {
	return leaseSigner{key: key, macs: &sync.Pool{New: func() any {
		return &leaseMAC{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 128)}
	}}}
}

// newLeaseSigner loads the store's lease key, offering a fresh random one
// in case the store has none yet.
func newLeaseSigner(st store.Store) (leaseSigner, error) {
	candidate := make([]byte, store.LeaseKeyLen)
	if _, err := rand.Read(candidate); err != nil {
		return leaseSigner{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseKeyTimeout)
	defer cancel()
	key, err := st.LeaseKey(ctx, candidate)
	if err != nil {
		return leaseSigner{}, fmt.Errorf("read the lease key: %w", err)
	}
	return newSigner(key), nil
}

// sign returns the secret of the lease t names.
func (s leaseSigner) sign(t store.LeaseToken) []byte {
	var m *leaseMAC
	if s.macs != nil {
		m, _ = s.macs.Get().(*leaseMAC)
		m.h.Reset()
	} else {
		m = &leaseMAC{h: hmac.New(sha256.New, s.key)}
	}
	// Length-prefixed fields: no two tokens encode alike.
	b := m.buf[:0]
	for _, f := range []string{t.JobID, t.WorkerID} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(t.Generation))
	m.h.Write(b)
	out := m.h.Sum(nil)
	if s.macs != nil && cap(b) <= 4096 {
		m.buf = b
		s.macs.Put(m)
	}
	return out
}

// verify reports whether secret is the lease's, in constant time.
func (s leaseSigner) verify(t store.LeaseToken, secret []byte) bool {
	return hmac.Equal(s.sign(t), secret)
}

// consoleSessionLabel separates the console's session key from every other
// use of the lease key.
const consoleSessionLabel = "leasehold console session key v1"

// ConsoleSessionKey is the key the web console seals its session cookies
// with: HMAC-SHA256 of a fixed label under the lease key the database
// holds, so that every coordinator of one database derives the same key
// (a session made on one replica opens on another) and nothing new is
// stored. Knowing it reveals nothing of the lease key.
func (c *Coordinator) ConsoleSessionKey() []byte {
	m := hmac.New(sha256.New, c.identity.leases.key)
	m.Write([]byte(consoleSessionLabel))
	return m.Sum(nil)
}
