package e2e

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// The answers that come from grpc-go's transport rather than from the
// coordinator, which docs/errors.md documents: a request over
// the receive limit is RESOURCE_EXHAUSTED, and a string field that is not
// UTF-8 fails proto decoding with INTERNAL. Neither reaches a handler, so
// neither carries an ErrorInfo.
func TestTransportLevelAnswersAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	s, c := setup(t, false, nil)
	ctx := ctxT(t)

	over := coordinator.PayloadMaxBytesDefault + coordinator.RecvHeadroom + 1
	_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Payload: make([]byte, over)}},
		grpc.MaxCallSendMsgSize(over+1024))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a %d-byte request = %v; want RESOURCE_EXHAUSTED", over, err)
	}

	// BytesValue's field 1 has the wire shape of GetJobRequest.job_id, but
	// bytes need not be UTF-8: the request codec answers for the string.
	conn := s.Dial(t)
	var out leaseholdv1.GetJobResponse
	err = conn.Invoke(ctx, leaseholdv1.JobService_GetJob_FullMethodName, wrapperspb.Bytes([]byte("\xff\xfe")), &out)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "job_id") {
		t.Fatalf("a job_id of invalid UTF-8 = %v; want INVALID_ARGUMENT naming job_id (the request codec checks UTF-8)", err)
	}
}
