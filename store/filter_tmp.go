package store

// Temporary stand-in for helper filter's store/filter.go (queues and
// states only); deleted when that lands.

import (
	"strings"
	"time"
)

// JobFilter selects jobs (temporary subset).
type JobFilter struct {
	Queues                                                     []string
	States                                                     []JobState
	Kinds                                                      []string
	Metadata                                                   map[string]string
	CreatedAfter, CreatedBefore, FinishedAfter, FinishedBefore time.Time
	ErrorCodes                                                 []string
	Dependency, ConcurrencyKey, Schedule                       string
	IDs                                                        []string
}

// IsZero reports whether f matches everything.
func (f JobFilter) IsZero() bool { return len(f.Queues) == 0 && len(f.States) == 0 }

// ParseJobFilter parses "queue = q AND state = s" (temporary subset).
func ParseJobFilter(s string) (JobFilter, error) {
	var f JobFilter
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	for _, term := range strings.Split(s, " AND ") {
		k, v, ok := strings.Cut(term, "=")
		if !ok {
			return f, Invalid("filter", "expected field = value")
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		switch k {
		case "queue":
			f.Queues = append(f.Queues, v)
		case "state":
			f.States = append(f.States, JobState(strings.ToLower(v)))
		default:
			return f, Invalid("filter", "unknown field "+k)
		}
	}
	return f, nil
}

// FilterError says what is wrong with a filter (temporary).
type FilterError struct{ Field, Description string }

func (e *FilterError) Error() string { return "filter " + e.Field + ": " + e.Description }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FilterError) Is(target error) bool { return target == ErrInvalid }
