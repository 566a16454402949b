package sqlite

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// A page cursor is opaque to clients: base64url (unpadded) of
// "<kind>1:<unix micros>:<job id>", the sort key of the last row of the
// previous page. The kind ('j' for ListJobs, 'd' for ListDeadJobs) keeps a
// token of one listing from being accepted by the other.
const (
	cursorJobs = "j1"
	cursorDead = "d1"
	// cursorOperations pages ListOperations.
	cursorOperations = "o1"
)

// cursorMaxLen bounds an encoded cursor: generous for a micros value and a
// job id of store.NameMaxLen bytes, small enough to refuse garbage early.
const cursorMaxLen = 512

type cursor struct {
	at time.Time
	id string
}

func encodeCursor(kind string, at time.Time, id string) string {
	raw := kind + ":" + strconv.FormatInt(at.UnixMicro(), 10) + ":" + id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor parses a cursor of the given kind. Any malformed token is
// store.ErrInvalid (an *store.InvalidError on field "cursor"), never a panic.
func decodeCursor(kind, token string) (cursor, error) {
	bad := store.Invalid("cursor", "is not a valid page token; pass the next_cursor of a previous page, or none")
	if len(token) > cursorMaxLen {
		return cursor{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return cursor{}, bad
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != kind {
		return cursor{}, bad
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return cursor{}, bad
	}
	if store.ValidateText("cursor", parts[2], store.NameMaxLen, true) != nil {
		return cursor{}, bad
	}
	return cursor{at: time.UnixMicro(us).UTC(), id: parts[2]}, nil
}
