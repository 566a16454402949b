package coordinator

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// answerSize is never below the encoded size of the answer it stands
// for, whatever its fields hold (long ids, a negative code, a long
// message, a secret left in).
func TestAnswerSizeBoundsTheEncodedAnswer(t *testing.T) {
	long := strings.Repeat("x", 70_000)
	for _, r := range []*leaseholdv1.ReportResult{
		{},
		{Token: &leaseholdv1.LeaseToken{JobId: "0190c3a4-7b2e-7d1a-9c4f-2b6e8d0a1f33", LeaseGeneration: 1, WorkerId: "w"},
			Kind: leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, State: leaseholdv1.JobState_JOB_STATE_SUCCEEDED},
		{Token: &leaseholdv1.LeaseToken{JobId: strings.Repeat("j", 200), LeaseGeneration: -1, WorkerId: strings.Repeat("w", 128), Secret: make([]byte, 32)},
			Kind: leaseholdv1.ReportKind_REPORT_KIND_RELEASE, Code: -1, Reason: "LEASE_LOST", Message: long, State: leaseholdv1.JobState(-1)},
	} {
		m := &leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_ReportResult{ReportResult: r}}
		if got, want := answerSize(r), proto.Size(m); got < want {
			t.Errorf("answerSize = %d, below the encoded %d bytes of %v", got, want, r)
		}
	}
}
