package coordinator

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
)

func TestReportParent(t *testing.T) {
	t.Parallel()
	const sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	t.Run("no trace context is no span", func(t *testing.T) {
		t.Parallel()
		sc, err := reportParent(nil)
		if err != nil || sc.IsValid() {
			t.Fatalf("reportParent(nil) = %v, %v", sc, err)
		}
	})
	t.Run("a sampled traceparent is the parent", func(t *testing.T) {
		t.Parallel()
		sc, err := reportParent(map[string]string{"traceparent": sampled, "tracestate": "k=v"})
		if err != nil || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.SpanID().String() != "b7ad6b7169203331" {
			t.Fatalf("reportParent = %v, %v", sc, err)
		}
	})
	t.Run("an unsampled traceparent is no span", func(t *testing.T) {
		t.Parallel()
		sc, err := reportParent(map[string]string{"traceparent": unsampled})
		if err != nil || sc.IsValid() {
			t.Fatalf("reportParent = %v, %v", sc, err)
		}
	})
	t.Run("another key is invalid", func(t *testing.T) {
		t.Parallel()
		_, err := reportParent(map[string]string{"traceparent": sampled, "baggage": "a=b"})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("err = %v, want invalid", err)
		}
	})
	t.Run("an oversized value is invalid", func(t *testing.T) {
		t.Parallel()
		_, err := reportParent(map[string]string{"tracestate": strings.Repeat("a", traceContextValueMax+1)})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("err = %v, want invalid", err)
		}
	})
}
