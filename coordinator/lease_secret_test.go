package coordinator

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

func testSigner() leaseSigner {
	return leaseSigner{key: bytes.Repeat([]byte{7}, store.LeaseKeyLen)}
}

// Every field of a lease changes its secret, and fields cannot be shifted
// into one another.
func TestLeaseSecretsDifferPerLease(t *testing.T) {
	s := testSigner()
	base := store.LeaseToken{JobID: "job-1", Generation: 3, WorkerID: "w"}
	seen := map[string]store.LeaseToken{}
	for _, tok := range []store.LeaseToken{
		base,
		{JobID: "job-2", Generation: 3, WorkerID: "w"},
		{JobID: "job-1", Generation: 4, WorkerID: "w"},
		{JobID: "job-1", Generation: 3, WorkerID: "x"},
		{JobID: "job-1w", Generation: 3, WorkerID: ""},
		{JobID: "job-", Generation: 3, WorkerID: "1w"},
	} {
		secret := s.sign(tok)
		if len(secret) != 32 {
			t.Fatalf("secret of %d bytes", len(secret))
		}
		if other, dup := seen[string(secret)]; dup {
			t.Errorf("%+v and %+v share a secret", tok, other)
		}
		seen[string(secret)] = tok
		if !s.verify(tok, secret) {
			t.Errorf("%+v: its own secret does not verify", tok)
		}
	}
	other := leaseSigner{key: bytes.Repeat([]byte{8}, store.LeaseKeyLen)}
	if other.verify(base, s.sign(base)) {
		t.Error("a secret verified under another key")
	}
}

// FuzzLeaseToken: decoding any token never panics, refuses a malformed job
// id as invalid, and accepts exactly the tokens whose secret is the
// signer's for their fields.
func FuzzLeaseToken(f *testing.F) {
	s := testSigner()
	good := store.LeaseToken{JobID: "0190c3a4-7b2e-7d1a-9c4f-2b6e8d0a1f33", Generation: 1, WorkerID: "w"}
	f.Add(good.JobID, good.Generation, good.WorkerID, s.sign(good))
	f.Add("", int64(0), "", []byte(nil))
	f.Add("j", int64(-1), "w", []byte{1})
	f.Fuzz(func(t *testing.T, jobID string, gen int64, worker string, secret []byte) {
		v := validator{leases: s}
		tok, err := v.token("token", &leaseholdv1.LeaseToken{JobId: jobID, LeaseGeneration: gen, WorkerId: worker, Secret: secret})
		want := store.LeaseToken{JobID: jobID, Generation: gen, WorkerID: worker}
		switch {
		case len(secret) == 0:
			var inv *store.InvalidError
			if !errors.As(err, &inv) || inv.Field != "token.secret" {
				t.Fatalf("no secret: %v, want token.secret invalid", err)
			}
		case jobIDErr(jobID) != nil:
			// The id's shape is checked before the secret.
			var inv *store.InvalidError
			if !errors.As(err, &inv) || inv.Field != "token.job_id" {
				t.Fatalf("malformed job id %q: %v, want token.job_id invalid", jobID, err)
			}
		case bytes.Equal(secret, s.sign(want)):
			if err != nil || tok != want {
				t.Fatalf("signed token: %+v, %v", tok, err)
			}
		default:
			if !errors.Is(err, errLeaseSecret) {
				t.Fatalf("unsigned token: %v, want errLeaseSecret", err)
			}
		}
	})
}

// A token whose job id is malformed is INVALID_ARGUMENT naming the field,
// even when its secret is the one its (malformed) values sign to.
func TestAMalformedTokenJobIDIsInvalidWhateverItsSecret(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"not-a-job-id", "0191D9C8-3F1E-7A2B-9C4D-5E6F7A8B9C0D0", "{0191d9c8-3f1e-7a2b-9c4d-5e6f7a8b9c0d}"} {
		tok := store.LeaseToken{JobID: id, Generation: 1, WorkerID: "w"}
		req := &leaseholdv1.CompleteRequest{Token: &leaseholdv1.LeaseToken{
			JobId: id, LeaseGeneration: 1, WorkerId: "w", Secret: testValidator.leases.sign(tok),
		}}
		_, _, _, err := testValidator.Report(req)
		st := toStatus(t.Context(), nil, err)
		if status.Code(st) != codes.InvalidArgument || !slices.Contains(fieldViolations(st), "token.job_id") {
			t.Errorf("job_id %q with its valid secret: %v (fields %v); want INVALID_ARGUMENT on token.job_id", id, st, fieldViolations(st))
		}
	}
}

func jobIDErr(id string) error { return jobID("job_id", id) }

// The pooled signer (newSigner) signs exactly as the HMAC of the
// length-prefixed fields always has (secrets of a coordinator of another
// version verify here), from any number of goroutines at once.
func TestPooledSignerSignsAsBefore(t *testing.T) {
	key := bytes.Repeat([]byte{7}, store.LeaseKeyLen)
	pooled := newSigner(key)
	want := func(tok store.LeaseToken) []byte {
		m := hmac.New(sha256.New, key)
		var n [8]byte
		for _, f := range []string{tok.JobID, tok.WorkerID} {
			binary.BigEndian.PutUint64(n[:], uint64(len(f)))
			m.Write(n[:])
			m.Write([]byte(f))
		}
		binary.BigEndian.PutUint64(n[:], uint64(tok.Generation))
		m.Write(n[:])
		return m.Sum(nil)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				tok := store.LeaseToken{JobID: fmt.Sprintf("job-%d-%d", g, i), Generation: int64(i), WorkerID: strings.Repeat("w", i%7)}
				got := pooled.sign(tok)
				if !bytes.Equal(got, want(tok)) || !bytes.Equal(testSigner().sign(tok), got) || !pooled.verify(tok, got) {
					t.Errorf("%+v: pooled secret %x, want %x", tok, got, want(tok))
					return
				}
			}
		})
	}
	wg.Wait()
}
