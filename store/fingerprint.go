package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"time"
)

// fingerprintVersion is bumped whenever the canonical form changes, so that
// records written by an older version never falsely match or conflict.
const fingerprintVersion = "v1"

// traceMetadataKeys are the W3C propagation keys SDKs inject into metadata.
var traceMetadataKeys = map[string]bool{"traceparent": true, "tracestate": true, "baggage": true}

// Fingerprint hashes the canonical form of a validated request after
// defaults: every field length-prefixed in a fixed order, metadata sorted by
// key. It never sees raw JSON or a server-generated id, so equal requests
// hash equally whatever the encoding or map order.
//
// Trace-context metadata (traceparent, tracestate, baggage) is left out: a
// producer retrying the same request from another span sends the same
// logical request, and must get a replay rather than a conflict.
//
// RunAt is part of the request; RunAfter is too, as a duration, because
// "now + 10s" sent twice is the same request even though now moved.
func Fingerprint(s JobSpec) string {
	h := sha256.New()
	var num [8]byte
	writeBytes := func(b []byte) {
		binary.BigEndian.PutUint64(num[:], uint64(len(b)))
		h.Write(num[:])
		h.Write(b)
	}
	writeInt := func(v int64) {
		binary.BigEndian.PutUint64(num[:], uint64(v))
		h.Write(num[:])
	}
	writeBytes([]byte(fingerprintVersion))
	writeBytes([]byte(s.Queue))
	writeBytes([]byte(s.Kind))
	writeBytes(s.Payload)
	keys := make([]string, 0, len(s.Metadata))
	for k := range s.Metadata {
		if traceMetadataKeys[k] {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	writeInt(int64(len(keys)))
	for _, k := range keys {
		writeBytes([]byte(k))
		writeBytes([]byte(s.Metadata[k]))
	}
	writeInt(int64(s.Priority))
	if s.RunAt.IsZero() {
		writeInt(0)
	} else {
		writeInt(s.RunAt.UTC().Truncate(time.Microsecond).UnixMicro())
	}
	writeInt(int64(s.RunAfter))
	writeInt(int64(s.MaxAttempts))
	writeBytes([]byte(s.Dependency))
	// Appended only when set, so that requests made before concurrency
	// keys existed keep their fingerprints.
	if s.ConcurrencyKey != "" {
		writeBytes([]byte(s.ConcurrencyKey))
	}
	return fingerprintVersion + ":" + hex.EncodeToString(h.Sum(nil))
}
