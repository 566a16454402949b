package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Unique jobs: the decisions both engines share. An engine runs the SQL
// (a partial unique index over the live jobs, and the unique_keys table
// for periods); what a key is, what counts as live and what a duplicate
// answers are decided here.

// UniqueConflict is what a create does when its unique key is held.
type UniqueConflict int

// The conflict behaviours.
const (
	// UniqueReturnExisting answers the job that holds the key, with
	// CreateResult.Duplicate set (the default).
	UniqueReturnExisting UniqueConflict = iota
	// UniqueFail fails the whole call with ErrUniqueConflict.
	UniqueFail
)

// UniqueOptions make a created job unique. Exactly one of Key and
// ByMetadataKeys is set.
type UniqueOptions struct {
	// Key is the producer's key.
	Key string
	// ByMetadataKeys derive the key from the job's kind and the values of
	// these metadata keys (UniqueKey).
	ByMetadataKeys []string
	// Period, when positive, holds the key for that long after the job's
	// creation whether the job finished or not. Zero: only live jobs hold
	// it.
	Period time.Duration
	// OnConflict says what a duplicate does.
	OnConflict UniqueConflict
}

// Bounds of UniqueOptions.
const (
	// UniqueKeyMaxLen bounds a given key.
	UniqueKeyMaxLen = 256
	// UniqueMetadataKeysMax bounds ByMetadataKeys.
	UniqueMetadataKeysMax = 16
	// UniquePeriodMin and UniquePeriodMax bound a period.
	UniquePeriodMin = time.Second
	UniquePeriodMax = 90 * 24 * time.Hour
	// UniqueDerivedPrefix starts every derived key; a given key may not
	// start with it, so the two never collide.
	UniqueDerivedPrefix = "derived:"
)

// ErrUniqueConflict is returned when a create that asked to fail on a
// duplicate found its unique key held. The whole call fails.
var ErrUniqueConflict = errors.New("the unique key is held by another job")

// UniqueLiveStates are the states in which a job holds its unique key:
// queued (including jobs scheduled for later and jobs waiting for a
// retry) and leased. The engines' partial unique index has the same
// predicate.
var UniqueLiveStates = []JobState{JobStateQueued, JobStateLeased}

// UniqueLive reports whether a job in state s holds its unique key.
func UniqueLive(s JobState) bool { return slices.Contains(UniqueLiveStates, s) }

// ValidateUnique checks a request's unique options; field names them
// (e.g. "requests[2].unique"). nil is valid (not unique).
func ValidateUnique(field string, u *UniqueOptions) error {
	if u == nil {
		return nil
	}
	switch {
	case u.Key == "" && len(u.ByMetadataKeys) == 0:
		return Invalid(field, "must set key or by_metadata_keys")
	case u.Key != "" && len(u.ByMetadataKeys) > 0:
		return Invalid(field, "must set only one of key and by_metadata_keys")
	}
	if u.Key != "" {
		if err := checkText(field+".key", u.Key, UniqueKeyMaxLen, true); err != nil {
			return err
		}
		if strings.HasPrefix(u.Key, UniqueDerivedPrefix) {
			return Invalid(field+".key", fmt.Sprintf("must not start with %q (derived keys do)", UniqueDerivedPrefix))
		}
	}
	if len(u.ByMetadataKeys) > UniqueMetadataKeysMax {
		return Invalid(field+".by_metadata_keys", fmt.Sprintf("must have at most %d keys", UniqueMetadataKeysMax))
	}
	seen := make(map[string]bool, len(u.ByMetadataKeys))
	for i, k := range u.ByMetadataKeys {
		f := fmt.Sprintf("%s.by_metadata_keys[%d]", field, i)
		if err := checkText(f, k, MetadataKeyMaxLen, true); err != nil {
			return err
		}
		if seen[k] {
			return Invalid(f, "must not repeat a key")
		}
		seen[k] = true
	}
	if u.Period != 0 && (u.Period < UniquePeriodMin || u.Period > UniquePeriodMax) {
		return Invalid(field+".period", "must be between 1s and 90 days")
	}
	if u.OnConflict != UniqueReturnExisting && u.OnConflict != UniqueFail {
		return Invalid(field+".on_conflict", "must be RETURN_EXISTING or FAIL")
	}
	return nil
}

// UniqueKey is the key a request is unique by: "" when u is nil, the
// given key, or UniqueDerivedPrefix and the hex SHA-256 of the job's kind
// and, for each of u.ByMetadataKeys in sorted order, the key and its value
// or its absence (so a missing key differs from an empty value, and the
// order the keys were listed in does not matter). The payload is never
// part of a key. The queue is not either: a key is unique in its tenant.
func UniqueKey(spec JobSpec, u *UniqueOptions) string {
	switch {
	case u == nil:
		return ""
	case u.Key != "":
		return u.Key
	}
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(spec.Kind)
	for _, k := range slices.Sorted(slices.Values(u.ByMetadataKeys)) {
		field(k)
		if v, ok := spec.Metadata[k]; ok {
			h.Write([]byte{1})
			field(v)
		} else {
			h.Write([]byte{0})
		}
	}
	return UniqueDerivedPrefix + hex.EncodeToString(h.Sum(nil))
}

// UniqueRequest is one request's uniqueness as an engine runs it.
type UniqueRequest struct {
	// Key is UniqueKey of the request, "" when it is not unique.
	Key    string
	Period time.Duration
	Fail   bool
	// First is the index of an earlier request of the same call with the
	// same key, which this one duplicates; -1 when none.
	First int
}

// PlanUnique resolves the unique keys of a call's requests and which of
// them repeat an earlier request's key (the later ones duplicate the
// first, whose job they answer). A repeat that asked to fail fails the
// call: ErrUniqueConflict naming it.
func PlanUnique(reqs []CreateRequest) ([]UniqueRequest, error) {
	out := make([]UniqueRequest, len(reqs))
	first := map[string]int{}
	for i, r := range reqs {
		out[i] = UniqueRequest{First: -1}
		if r.Unique == nil {
			continue
		}
		key := UniqueKey(r.Spec, r.Unique)
		out[i].Key, out[i].Period, out[i].Fail = key, r.Unique.Period, r.Unique.OnConflict == UniqueFail
		if j, ok := first[key]; ok {
			if out[i].Fail {
				return nil, UniqueConflictError(i, len(reqs), "")
			}
			out[i].First = j
			continue
		}
		first[key] = i
	}
	return out, nil
}

// DecideUniqueHeld answers request i of n, whose key the existing job
// holds: that job as a duplicate, or ErrUniqueConflict when the request
// asked to fail.
func DecideUniqueHeld(u UniqueRequest, i, n int, existing *Job) (CreateResult, error) {
	if u.Fail {
		return CreateResult{}, UniqueConflictError(i, n, existing.ID)
	}
	return CreateResult{Job: existing, Duplicate: true}, nil
}

// UniqueConflictError is the ErrUniqueConflict of request i of n, naming
// the holder when known.
func UniqueConflictError(i, n int, holder string) error {
	field := "unique"
	if n > 1 {
		field = fmt.Sprintf("requests[%d].unique", i)
	}
	if holder == "" {
		return fmt.Errorf("%s: an earlier request of the batch has the key: %w", field, ErrUniqueConflict)
	}
	return fmt.Errorf("%s: job %s holds the key: %w", field, holder, ErrUniqueConflict)
}

// UniqueInsertAttempts bounds how often an engine inserts a unique job
// whose key's holder finished between the conflict and the read of the
// holder; each such race needs another job to take and finish the key in
// that instant, so the bound is never reached in practice, and reaching
// it answers ErrUnavailable (retry).
const UniqueInsertAttempts = 8
