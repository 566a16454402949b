package store

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// JobFilter selects jobs. Zero fields match everything; fields combine by AND;
// the values of a list field combine by OR.
//
// It is shared by ListJobs, ListDeadJobs, CountJobs and the bulk operations,
// and always applies inside the caller's tenant (and, in the coordinator,
// its queue scopes). The string form is ParseJobFilter's grammar
// (docs/filters.md); String prints a filter back in it.
type JobFilter struct {
	Queues   []string
	States   []JobState
	Kinds    []string
	Metadata map[string]string // key = value, all must hold
	// CreatedAfter is inclusive, CreatedBefore exclusive; zero is
	// unbounded. Both engines store microseconds: a bound with a finer
	// fraction is rounded up to the next microsecond, which keeps the
	// same jobs in and out (FilterTime).
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// FinishedAfter (inclusive) and FinishedBefore (exclusive) bound
	// finished_at; a job that is not terminal has none and matches
	// neither.
	FinishedAfter  time.Time
	FinishedBefore time.Time
	// ErrorCodes match the code of the job's last error.
	ErrorCodes     []string
	Dependency     string
	ConcurrencyKey string
	// Schedule is the id of the schedule that created the job: every
	// fired job carries it as metadata ScheduleMetadataKey, so it is that
	// metadata condition under its own name.
	Schedule string
	// IDs are explicit job ids (the console's "these rows").
	IDs []string
}

// Bounds of a filter. A filter string over FilterMaxLen bytes, with more
// than FilterMaxTerms terms or more than FilterMaxValues values in one list
// (FilterMaxIDs for ids) is refused.
const (
	FilterMaxLen    = 8192
	FilterMaxTerms  = 32
	FilterMaxValues = 100
	FilterMaxIDs    = ListLimitMax
)

// The filter field names, as the grammar and the errors spell them.
const (
	FilterFieldQueue          = "queue"
	FilterFieldState          = "state"
	FilterFieldKind           = "kind"
	FilterFieldMetadata       = "metadata"
	FilterFieldCreated        = "created"
	FilterFieldFinished       = "finished"
	FilterFieldErrorCode      = "error_code"
	FilterFieldDependency     = "dependency"
	FilterFieldConcurrencyKey = "concurrency_key"
	FilterFieldSchedule       = "schedule"
	FilterFieldID             = "id"
)

// FilterError says what is wrong with a filter: Field is the filter field
// at fault ("state", "metadata.customer"), or empty for a syntax error
// that belongs to no field; Description says why, for an operator. It
// matches ErrInvalid with errors.Is.
type FilterError struct{ Field, Description string }

func (e *FilterError) Error() string {
	if e.Field == "" {
		return "filter: " + e.Description
	}
	return "filter: " + e.Field + ": " + e.Description
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FilterError) Is(target error) bool { return target == ErrInvalid }

func filterErr(field, format string, args ...any) *FilterError {
	return &FilterError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// IsZero reports whether f has no condition (it matches every job).
func (f JobFilter) IsZero() bool {
	return len(f.Queues) == 0 && len(f.States) == 0 && len(f.Kinds) == 0 && len(f.Metadata) == 0 &&
		f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero() &&
		f.FinishedAfter.IsZero() && f.FinishedBefore.IsZero() &&
		len(f.ErrorCodes) == 0 && f.Dependency == "" && f.ConcurrencyKey == "" &&
		f.Schedule == "" && len(f.IDs) == 0
}

// FilterTime is a filter bound as both engines compare it: UTC, rounded up
// to the microsecond. For stored times t (whole microseconds), t >= b and
// t < b hold exactly when they hold against FilterTime(b).
func FilterTime(b time.Time) time.Time {
	b = b.UTC()
	if r := b.Truncate(time.Microsecond); !r.Equal(b) {
		return r.Add(time.Microsecond)
	}
	return b
}

// filterTimeMin and filterTimeMax bound a time bound: what both engines'
// time columns hold.
var (
	filterTimeMin = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	filterTimeMax = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// Validate checks f against the store's bounds; the error is a
// *FilterError. Engines call it before any SQL runs.
func (f JobFilter) Validate() error {
	if err := checkList(FilterFieldQueue, f.Queues, FilterMaxValues, checkFilterName); err != nil {
		return err
	}
	if len(f.States) > FilterMaxValues {
		return filterErr(FilterFieldState, "must have at most %d values", FilterMaxValues)
	}
	for _, st := range f.States {
		if !knownState(st) {
			return filterErr(FilterFieldState, "unknown state %q (one of QUEUED, LEASED, SUCCEEDED, FAILED, CANCELLED, DEAD)", string(st))
		}
	}
	if err := checkList(FilterFieldKind, f.Kinds, FilterMaxValues, checkFilterName); err != nil {
		return err
	}
	if len(f.Metadata) > MetadataMaxEntries {
		return filterErr(FilterFieldMetadata, "must have at most %d keys", MetadataMaxEntries)
	}
	for k, v := range f.Metadata {
		field := FilterFieldMetadata + "." + k
		if err := checkFilterText(FilterFieldMetadata, k, MetadataKeyMaxLen, true); err != nil {
			return filterErr(FilterFieldMetadata, "key %s", err.Description)
		}
		if err := checkFilterText(field, v, MetadataValueMaxLen, false); err != nil {
			return err
		}
	}
	if err := checkRange(FilterFieldCreated, f.CreatedAfter, f.CreatedBefore); err != nil {
		return err
	}
	if err := checkRange(FilterFieldFinished, f.FinishedAfter, f.FinishedBefore); err != nil {
		return err
	}
	if err := checkList(FilterFieldErrorCode, f.ErrorCodes, FilterMaxValues, func(field, s string) *FilterError {
		return checkFilterText(field, s, ErrorCodeMaxLen, true)
	}); err != nil {
		return err
	}
	if f.Dependency != "" {
		if err := checkFilterName(FilterFieldDependency, f.Dependency); err != nil {
			return err
		}
	}
	if err := checkFilterText(FilterFieldConcurrencyKey, f.ConcurrencyKey, NameMaxLen, false); err != nil {
		return err
	}
	if err := checkFilterText(FilterFieldSchedule, f.Schedule, NameMaxLen, false); err != nil {
		return err
	}
	return checkList(FilterFieldID, f.IDs, FilterMaxIDs, func(field, s string) *FilterError {
		return checkFilterText(field, s, NameMaxLen, true)
	})
}

func knownState(st JobState) bool {
	switch st {
	case JobStateQueued, JobStateLeased, JobStateSucceeded, JobStateFailed, JobStateCancelled, JobStateDead:
		return true
	}
	return false
}

func checkList(field string, vs []string, maxValues int, check func(field, s string) *FilterError) error {
	if len(vs) > maxValues {
		return filterErr(field, "must have at most %d values", maxValues)
	}
	for _, v := range vs {
		if err := check(field, v); err != nil {
			return err
		}
	}
	return nil
}

func checkFilterName(field, s string) *FilterError {
	if !ValidName(s) {
		return filterErr(field, "%q %s", s, nameRule)
	}
	return nil
}

func checkFilterText(field, s string, maxLen int, required bool) *FilterError {
	switch {
	case required && s == "":
		return filterErr(field, "must not be empty")
	case len(s) > maxLen:
		return filterErr(field, "must be at most %d bytes", maxLen)
	case strings.IndexByte(s, 0) >= 0:
		return filterErr(field, "must not contain NUL bytes")
	case !utf8.ValidString(s):
		return filterErr(field, "must be valid UTF-8")
	}
	return nil
}

func checkRange(field string, after, before time.Time) error {
	for _, t := range []time.Time{after, before} {
		if !t.IsZero() && (t.Before(filterTimeMin) || t.After(filterTimeMax)) {
			return filterErr(field, "%s is outside the years 1-9999", t.UTC().Format(time.RFC3339Nano))
		}
	}
	if !after.IsZero() && !before.IsZero() && !FilterTime(after).Before(FilterTime(before)) {
		return filterErr(field, "the range [%s, %s) is empty", after.UTC().Format(time.RFC3339Nano), before.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// String prints f in ParseJobFilter's grammar, in a canonical form (fields
// in a fixed order, metadata keys sorted); ParseJobFilter(f.String())
// gives f back for every valid f. The zero filter prints as "".
func (f JobFilter) String() string {
	var terms []string
	list := func(field string, vs []string) {
		switch len(vs) {
		case 0:
		case 1:
			terms = append(terms, field+" = "+quote(vs[0]))
		default:
			q := make([]string, len(vs))
			for i, v := range vs {
				q[i] = quote(v)
			}
			terms = append(terms, field+":("+strings.Join(q, ", ")+")")
		}
	}
	one := func(field, v string) {
		if v != "" {
			terms = append(terms, field+" = "+quote(v))
		}
	}
	bounds := func(field string, after, before time.Time) {
		if !after.IsZero() {
			terms = append(terms, field+" >= "+quote(after.UTC().Format(time.RFC3339Nano)))
		}
		if !before.IsZero() {
			terms = append(terms, field+" < "+quote(before.UTC().Format(time.RFC3339Nano)))
		}
	}
	list(FilterFieldQueue, f.Queues)
	states := make([]string, len(f.States))
	for i, st := range f.States {
		states[i] = strings.ToUpper(string(st))
	}
	switch len(states) {
	case 0:
	case 1:
		terms = append(terms, FilterFieldState+" = "+states[0])
	default:
		terms = append(terms, FilterFieldState+":("+strings.Join(states, ", ")+")")
	}
	list(FilterFieldKind, f.Kinds)
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		key := k
		if !bareKey(k) {
			key = quote(k)
		}
		terms = append(terms, FilterFieldMetadata+"."+key+" = "+quote(f.Metadata[k]))
	}
	bounds(FilterFieldCreated, f.CreatedAfter, f.CreatedBefore)
	bounds(FilterFieldFinished, f.FinishedAfter, f.FinishedBefore)
	list(FilterFieldErrorCode, f.ErrorCodes)
	one(FilterFieldDependency, f.Dependency)
	one(FilterFieldConcurrencyKey, f.ConcurrencyKey)
	one(FilterFieldSchedule, f.Schedule)
	list(FilterFieldID, f.IDs)
	return strings.Join(terms, " AND ")
}

// quote is s as a filter string literal: in double quotes, with \" and \\
// escaped, and control characters as \n, \t, \r or \uXXXX.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// bareKey reports whether a metadata key can follow "metadata." unquoted.
func bareKey(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		if !isKeyByte(k[i]) {
			return false
		}
	}
	return true
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/'
}

// ParseJobFilter parses a filter string (an AIP-160 subset, documented in
// docs/filters.md):
//
//	filter  = [ term { "AND" term } ]
//	term    = field op value | field ":" "(" value { "," value } ")"
//	op      = "=" | ":" | ">=" | ">" | "<=" | "<"
//	value   = "quoted string" | bare-word
//
// Fields: queue, state, kind, metadata.<key>, created, finished,
// error_code, dependency, concurrency_key, schedule, id. The empty (or
// all-blank) string is the zero filter. Every error is a *FilterError.
func ParseJobFilter(s string) (JobFilter, error) {
	var f JobFilter
	if len(s) > FilterMaxLen {
		return f, filterErr("", "must be at most %d bytes", FilterMaxLen)
	}
	if !utf8.ValidString(s) {
		return f, filterErr("", "must be valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return f, filterErr("", "must not contain NUL bytes")
	}
	p := &filterParser{s: s, seen: map[string]bool{}}
	p.skipSpace()
	if p.done() {
		return f, nil
	}
	for terms := 1; ; terms++ {
		if terms > FilterMaxTerms {
			return JobFilter{}, filterErr("", "must have at most %d terms", FilterMaxTerms)
		}
		if err := p.term(&f); err != nil {
			return JobFilter{}, err
		}
		p.skipSpace()
		if p.done() {
			break
		}
		word := p.peekWord()
		switch word {
		case "AND":
			p.pos += len(word)
			if !p.spaceFollows() {
				return JobFilter{}, p.errorf("", "expected a space after AND")
			}
			p.skipSpace()
			if p.done() {
				return JobFilter{}, p.errorf("", "expected a term after AND")
			}
		case "OR":
			return JobFilter{}, p.errorf("", "OR is not supported: list the values of one field instead, e.g. state:(QUEUED, LEASED)")
		case "and", "or":
			return JobFilter{}, p.errorf("", "AND and OR are written in capitals")
		default:
			return JobFilter{}, p.errorf("", "expected AND between terms")
		}
	}
	if err := f.Validate(); err != nil {
		return JobFilter{}, err
	}
	return f, nil
}

// filterParser is ParseJobFilter's state: the input and the position.
type filterParser struct {
	s   string
	pos int
	// seen holds the fields (and bounds) already given: a field twice is
	// refused rather than read as an intersection.
	seen map[string]bool
}

func (p *filterParser) done() bool { return p.pos >= len(p.s) }

func (p *filterParser) errorf(field, format string, args ...any) *FilterError {
	return filterErr(field, "at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *filterParser) skipSpace() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n' || p.s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *filterParser) spaceFollows() bool {
	if p.done() {
		return true
	}
	c := p.s[p.pos]
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// peekWord is the run of letters at the position.
func (p *filterParser) peekWord() string {
	i := p.pos
	for i < len(p.s) && (p.s[i] >= 'a' && p.s[i] <= 'z' || p.s[i] >= 'A' && p.s[i] <= 'Z') {
		i++
	}
	return p.s[p.pos:i]
}

// field reads a field name: letters, digits and _; "metadata." is
// followed by a key, bare ([A-Za-z0-9_./-]) or quoted.
func (p *filterParser) field() (name, key string, err *FilterError) {
	start := p.pos
	for p.pos < len(p.s) && (isKeyByte(p.s[p.pos]) && p.s[p.pos] != '.' && p.s[p.pos] != '/' && p.s[p.pos] != '-') {
		p.pos++
	}
	name = p.s[start:p.pos]
	if name == "" {
		return "", "", p.errorf("", "expected a field name (queue, state, kind, metadata.<key>, created, finished, error_code, dependency, concurrency_key, schedule, id)")
	}
	if name != FilterFieldMetadata {
		if !p.done() && p.s[p.pos] == '.' {
			return "", "", p.errorf(name, "only metadata has subfields")
		}
		return name, "", nil
	}
	if p.done() || p.s[p.pos] != '.' {
		return "", "", p.errorf(FilterFieldMetadata, "write metadata.<key>, e.g. metadata.customer = \"42\"")
	}
	p.pos++
	if !p.done() && p.s[p.pos] == '"' {
		k, err := p.quoted(FilterFieldMetadata)
		if err != nil {
			return "", "", err
		}
		return name, k, nil
	}
	kstart := p.pos
	for p.pos < len(p.s) && isKeyByte(p.s[p.pos]) {
		p.pos++
	}
	if p.pos == kstart {
		return "", "", p.errorf(FilterFieldMetadata, "expected a key after metadata.")
	}
	return name, p.s[kstart:p.pos], nil
}

// op reads a comparison operator.
func (p *filterParser) op(field string) (string, *FilterError) {
	for _, op := range []string{">=", "<=", "!=", "=", ":", ">", "<"} {
		if strings.HasPrefix(p.s[p.pos:], op) {
			p.pos += len(op)
			if op == "!=" {
				return "", p.errorf(field, "!= is not supported")
			}
			return op, nil
		}
	}
	return "", p.errorf(field, "expected an operator (=, :, >=, >, <=, <)")
}

// quoted reads a double-quoted string with \" \\ \n \t \r \uXXXX escapes.
func (p *filterParser) quoted(field string) (string, *FilterError) {
	start := p.pos
	p.pos++ // the opening quote
	var b strings.Builder
	for {
		if p.done() {
			p.pos = start
			return "", p.errorf(field, "unterminated string")
		}
		c := p.s[p.pos]
		switch c {
		case '"':
			p.pos++
			return b.String(), nil
		case '\\':
			if p.pos+1 >= len(p.s) {
				p.pos = start
				return "", p.errorf(field, "unterminated string")
			}
			e := p.s[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'u':
				if p.pos+4 > len(p.s) {
					return "", p.errorf(field, `\u needs four hex digits`)
				}
				n, err := strconv.ParseUint(p.s[p.pos:p.pos+4], 16, 16)
				if err != nil || !utf8.ValidRune(rune(n)) {
					return "", p.errorf(field, `\u needs four hex digits of a valid character`)
				}
				b.WriteRune(rune(n))
				p.pos += 4
			default:
				p.pos -= 2
				return "", p.errorf(field, "unknown escape \\%c", e)
			}
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
}

// value reads one value: quoted, or a bare word (anything up to a space,
// a comma, a parenthesis or a quote).
func (p *filterParser) value(field string) (string, *FilterError) {
	p.skipSpace()
	if p.done() {
		return "", p.errorf(field, "expected a value")
	}
	if p.s[p.pos] == '"' {
		return p.quoted(field)
	}
	start := p.pos
	for p.pos < len(p.s) && strings.IndexByte(" \t\r\n,()\"", p.s[p.pos]) < 0 {
		p.pos++
	}
	if p.pos == start {
		return "", p.errorf(field, "expected a value")
	}
	return p.s[start:p.pos], nil
}

// values reads the value of a term: a list "(" v { "," v } ")" after ":",
// else one value.
func (p *filterParser) values(field, op string) ([]string, *FilterError) {
	p.skipSpace()
	if op != ":" || p.done() || p.s[p.pos] != '(' {
		v, err := p.value(field)
		if err != nil {
			return nil, err
		}
		return []string{v}, nil
	}
	p.pos++
	var out []string
	for {
		v, err := p.value(field)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if len(out) > FilterMaxIDs {
			return nil, p.errorf(field, "too many values")
		}
		p.skipSpace()
		if p.done() {
			return nil, p.errorf(field, "expected ) to close the list")
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
		case ')':
			p.pos++
			return out, nil
		default:
			return nil, p.errorf(field, "expected , or ) in the list")
		}
	}
}

// once marks key as given, refusing it the second time.
func (p *filterParser) once(field, key string) *FilterError {
	if p.seen[key] {
		return p.errorf(field, "is given twice; list several values as %s:(\"a\", \"b\")", field)
	}
	p.seen[key] = true
	return nil
}

// term reads one term into f.
func (p *filterParser) term(f *JobFilter) *FilterError {
	if p.s[p.pos] == '(' {
		return p.errorf("", "parentheses group values only, as in state:(QUEUED, LEASED)")
	}
	if w := p.peekWord(); w == "NOT" {
		return p.errorf("", "NOT is not supported")
	}
	if p.s[p.pos] == '-' {
		return p.errorf("", "negation is not supported")
	}
	name, key, err := p.field()
	if err != nil {
		return err
	}
	field := name
	if name == FilterFieldMetadata {
		field = name + "." + key
	}
	switch name {
	case "created_at":
		name = FilterFieldCreated
	case "finished_at":
		name = FilterFieldFinished
	case "job_id":
		name = FilterFieldID
	}
	p.skipSpace()
	op, err := p.op(field)
	if err != nil {
		return err
	}
	vs, err := p.values(field, op)
	if err != nil {
		return err
	}
	switch name {
	case FilterFieldQueue, FilterFieldKind, FilterFieldErrorCode, FilterFieldID, FilterFieldState:
		return p.listTerm(f, name, op, vs)
	case FilterFieldMetadata, FilterFieldDependency, FilterFieldConcurrencyKey, FilterFieldSchedule:
		return p.oneTerm(f, name, key, op, vs)
	case FilterFieldCreated, FilterFieldFinished:
		return p.timeTerm(f, name, op, vs)
	}
	return filterErr(name, "unknown field (one of queue, state, kind, metadata.<key>, created, finished, error_code, dependency, concurrency_key, schedule, id)")
}

// listTerm sets a list field from its values.
func (p *filterParser) listTerm(f *JobFilter, field, op string, vs []string) *FilterError {
	if op != "=" && op != ":" {
		return p.errorf(field, "compare with = or :, not %s", op)
	}
	if err := p.once(field, field); err != nil {
		return err
	}
	switch field {
	case FilterFieldQueue:
		f.Queues = vs
	case FilterFieldKind:
		f.Kinds = vs
	case FilterFieldErrorCode:
		f.ErrorCodes = vs
	case FilterFieldID:
		f.IDs = vs
	default: // FilterFieldState
		for _, v := range vs {
			st, ok := ParseJobState(v)
			if !ok {
				return filterErr(field, "unknown state %q (one of QUEUED, LEASED, SUCCEEDED, FAILED, CANCELLED, DEAD)", v)
			}
			f.States = append(f.States, st)
		}
	}
	return nil
}

// oneTerm sets a field of one value (a metadata key's, for metadata).
func (p *filterParser) oneTerm(f *JobFilter, name, key, op string, vs []string) *FilterError {
	field := name
	if name == FilterFieldMetadata {
		field = name + "." + key
	}
	if op != "=" && op != ":" {
		return p.errorf(field, "compare with = or :, not %s", op)
	}
	if len(vs) != 1 {
		return p.errorf(field, "takes one value, not a list")
	}
	if err := p.once(field, field); err != nil {
		return err
	}
	v := vs[0]
	if v == "" && name != FilterFieldMetadata {
		return filterErr(field, "must not be empty")
	}
	switch name {
	case FilterFieldMetadata:
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[key] = v
	case FilterFieldDependency:
		f.Dependency = v
	case FilterFieldConcurrencyKey:
		f.ConcurrencyKey = v
	default: // FilterFieldSchedule
		f.Schedule = v
	}
	return nil
}

// timeTerm sets one bound of a time range: >= and > the lower
// (inclusive), < and <= the upper (exclusive), > and <= by adding a
// nanosecond.
func (p *filterParser) timeTerm(f *JobFilter, field, op string, vs []string) *FilterError {
	if len(vs) != 1 {
		return p.errorf(field, "takes one time, not a list")
	}
	t, perr := time.Parse(time.RFC3339Nano, vs[0])
	if perr != nil {
		return filterErr(field, "%q is not an RFC 3339 time such as \"2026-12-01T00:00:00Z\"", vs[0])
	}
	t = t.UTC()
	var after bool
	switch op {
	case ">=":
		after = true
	case ">":
		after, t = true, t.Add(time.Nanosecond)
	case "<":
	case "<=":
		t = t.Add(time.Nanosecond)
	default:
		return p.errorf(field, "compare a time with >=, >, <= or <, not %s", op)
	}
	bound := "before"
	if after {
		bound = "after"
	}
	if err := p.once(field, field+" "+bound); err != nil {
		return filterErr(field, "has two lower or two upper bounds")
	}
	switch {
	case field == FilterFieldCreated && after:
		f.CreatedAfter = t
	case field == FilterFieldCreated:
		f.CreatedBefore = t
	case after:
		f.FinishedAfter = t
	default:
		f.FinishedBefore = t
	}
	return nil
}

// ParseJobState reads a state as the API and the filter spell it: QUEUED,
// queued or JOB_STATE_QUEUED.
func ParseJobState(s string) (JobState, bool) {
	st := JobState(strings.ToLower(strings.TrimPrefix(strings.ToUpper(s), "JOB_STATE_")))
	return st, knownState(st)
}

// JSONStrings is vs as a JSON array of strings, for an engine that binds a
// list as one JSON argument (store's one encoder).
func JSONStrings(vs []string) string {
	b := []byte{'['}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, v)
	}
	return string(append(b, ']'))
}

// JSONObject is md as a JSON object of strings, keys sorted.
func JSONObject(md map[string]string) string {
	b := []byte{'{'}
	for i, k := range slices.Sorted(maps.Keys(md)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, md[k])
	}
	return string(append(b, '}'))
}
