// Package measure holds what both sides of the side-by-side benchmark share,
// so that Leasehold (`leasehold bench`) and River (bench/river) are measured
// with one definition of every figure: the common flags, the per-job
// timeline and the figures computed from it, PostgreSQL commit counting,
// fresh schemas, and the machine-readable RESULT line that `leasehold bench
// compare` parses.
//
// It imports pgx and nothing of Leasehold, so the River module can use it
// without pulling in the coordinator.
package measure

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ResultPrefix starts the one machine-readable line a run prints.
const ResultPrefix = "RESULT"

// Identity keys every RESULT line carries.
const (
	KeySystem = "system"
	KeyEngine = "engine"
	KeyMode   = "mode"
)

var keyPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Field is one key=value pair of a RESULT line.
type Field struct {
	Key, Value string
}

// Result is a RESULT line: key=value fields in the order they were set.
// Values never contain spaces or '='. The zero value is empty and usable.
type Result struct {
	fields []Field
}

// NewResult starts a line with the identity fields.
func NewResult(system, engine, mode string) *Result {
	r := &Result{}
	r.Set(KeySystem, system)
	r.Set(KeyEngine, engine)
	r.Set(KeyMode, mode)
	return r
}

// Set sets key to value, replacing an earlier value in place. It panics on
// a malformed key or value: those are programming errors of the caller,
// never user input.
func (r *Result) Set(key, value string) {
	if !keyPattern.MatchString(key) {
		panic(fmt.Sprintf("measure: bad RESULT key %q", key))
	}
	if value == "" || strings.ContainsAny(value, " \t\n=") {
		panic(fmt.Sprintf("measure: bad RESULT value %q for %s", value, key))
	}
	for i := range r.fields {
		if r.fields[i].Key == key {
			r.fields[i].Value = value
			return
		}
	}
	r.fields = append(r.fields, Field{Key: key, Value: value})
}

// SetInt sets an integer field.
func (r *Result) SetInt(key string, v int64) { r.Set(key, strconv.FormatInt(v, 10)) }

// SetFloat sets a number with prec digits after the point.
func (r *Result) SetFloat(key string, v float64, prec int) {
	r.Set(key, strconv.FormatFloat(v, 'f', prec, 64))
}

// SetMillis sets a duration in milliseconds with microsecond resolution.
func (r *Result) SetMillis(key string, d time.Duration) {
	r.SetFloat(key, float64(d)/float64(time.Millisecond), 3)
}

// Get returns key's value.
func (r *Result) Get(key string) (string, bool) {
	for _, f := range r.fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

// Float returns key's value as a number; ok is false when it is missing or
// not a number.
func (r *Result) Float(key string) (v float64, ok bool) {
	s, ok := r.Get(key)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// Fields returns a copy of the fields in order.
func (r *Result) Fields() []Field { return append([]Field(nil), r.fields...) }

// String formats the line: "RESULT key=value ...".
func (r *Result) String() string {
	var b strings.Builder
	b.WriteString(ResultPrefix)
	for _, f := range r.fields {
		b.WriteByte(' ')
		b.WriteString(f.Key)
		b.WriteByte('=')
		b.WriteString(f.Value)
	}
	return b.String()
}

// ParseResult parses one RESULT line. It requires the system and mode
// fields, well-formed keys, and no key twice.
func ParseResult(line string) (*Result, error) {
	tokens := strings.Fields(line)
	if len(tokens) == 0 || tokens[0] != ResultPrefix {
		return nil, fmt.Errorf("not a %s line: %q", ResultPrefix, line)
	}
	r := &Result{}
	seen := map[string]bool{}
	for _, tok := range tokens[1:] {
		key, value, ok := strings.Cut(tok, "=")
		if !ok || !keyPattern.MatchString(key) || value == "" || strings.Contains(value, "=") {
			return nil, fmt.Errorf("malformed field %q in %s line", tok, ResultPrefix)
		}
		if seen[key] {
			return nil, fmt.Errorf("field %q repeated in %s line", key, ResultPrefix)
		}
		seen[key] = true
		r.fields = append(r.fields, Field{Key: key, Value: value})
	}
	for _, k := range []string{KeySystem, KeyMode} {
		if _, ok := r.Get(k); !ok {
			return nil, fmt.Errorf("%s line has no %s field", ResultPrefix, k)
		}
	}
	return r, nil
}

// ErrNoResult is returned by FindResult when a run's output had no RESULT
// line.
var ErrNoResult = errors.New("no " + ResultPrefix + " line in the output")

// FindResult returns the last RESULT line of a run's output, parsed.
func FindResult(output string) (*Result, error) {
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, ResultPrefix+" ") {
			return ParseResult(line)
		}
	}
	return nil, ErrNoResult
}
