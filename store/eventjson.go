package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// eventJSON encodes event data from key, value pairs exactly as
// json.Marshal encodes a map of them (keys sorted, a repeated key's last
// value), times as RFC 3339 in UTC, so both engines store the same text.
// It writes strings, integers, booleans and times itself and leaves any
// other value to json.Marshal: every job writes two or three events, and
// building a map to marshal by reflection was a seventh of the
// coordinator's CPU while it created jobs (pprof, BatchCreateJobs of
// 1,000). FuzzEventData holds it to json.Marshal's output.
func eventJSON(kv ...any) string {
	type pair struct {
		key string
		val any
	}
	pairs := make([]pair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			panic(fmt.Sprintf("store: event data key %v is not a string", kv[i]))
		}
		pairs = append(pairs, pair{k, kv[i+1]})
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	b := make([]byte, 0, 32*len(pairs)+2)
	b = append(b, '{')
	for i, p := range pairs {
		if i+1 < len(pairs) && pairs[i+1].key == p.key {
			continue // a later value of the same key wins, as in a map
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p.key)
		b = append(b, ':')
		b = appendJSONValue(b, p.val)
	}
	return string(append(b, '}'))
}

func appendJSONValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		return appendJSONString(b, v)
	case time.Time:
		return appendJSONString(b, v.UTC().Format(time.RFC3339Nano))
	case bool:
		return strconv.AppendBool(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int32:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	}
	return appendMarshaled(b, v)
}

// appendMarshaled appends json.Marshal's encoding of v.
func appendMarshaled(b []byte, v any) []byte {
	enc, err := json.Marshal(v)
	if err != nil {
		// Only strings, numbers, booleans and times go in.
		panic("store: unencodable event data: " + err.Error())
	}
	return append(b, enc...)
}

// appendJSONString appends s quoted. Printable ASCII that json.Marshal
// leaves as it is goes in directly; anything else (quotes, backslashes,
// control bytes, <, > and &, which json.Marshal escapes for HTML, and
// non-ASCII) is json.Marshal's.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendMarshaled(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
