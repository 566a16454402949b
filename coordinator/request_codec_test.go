package coordinator

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// rawCodec sends and receives bytes as they are, so a test can put on the
// wire what no generated client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// invalidUTF8JobID is a GetJobRequest (and a WatchJobRequest) whose job_id,
// field 1, holds the bytes 0xff 0xfe.
var invalidUTF8JobID = []byte{0x0a, 0x02, 0xff, 0xfe}

// A request with invalid UTF-8 in a string field, or bytes that are no
// message at all, is INVALID_ARGUMENT naming the field, over a real
// socket, for a unary call and for a stream's message; an unauthenticated
// caller is still told UNAUTHENTICATED first.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	key, _ := e.key(tenantA, store.RoleAdmin)
	conn := e.dial(key)
	ctx := t.Context()
	call := func(conn *grpc.ClientConn, method string, in []byte) error {
		var out []byte
		return conn.Invoke(ctx, method, &in, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	err := call(conn, leaseholdv1.JobService_GetJob_FullMethodName, invalidUTF8JobID)
	if status.Code(err) != codes.InvalidArgument || reasonOf(err) != ReasonInvalidArgument || len(fieldViolations(err)) != 1 || fieldViolations(err)[0] != "job_id" {
		t.Errorf("GetJob with invalid UTF-8 in job_id: %v (fields %v); want INVALID_ARGUMENT on job_id", err, fieldViolations(err))
	}
	err = call(conn, leaseholdv1.JobService_GetJob_FullMethodName, []byte{0x0a, 0x7f})
	if status.Code(err) != codes.InvalidArgument || len(fieldViolations(err)) != 1 {
		t.Errorf("GetJob of truncated bytes: %v (fields %v); want INVALID_ARGUMENT with a field violation", err, fieldViolations(err))
	}
	err = call(e.dial(""), leaseholdv1.JobService_GetJob_FullMethodName, invalidUTF8JobID)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("an undecodable request without credentials: %v; want UNAUTHENTICATED", err)
	}
	// Refused before the check, its note is dropped all the same.
	left := 0
	undecodable.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d undecodable requests still noted after their calls ended", left)
	}

	desc := &grpc.StreamDesc{ServerStreams: true}
	cs, err := conn.NewStream(ctx, desc, leaseholdv1.JobService_WatchJob_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	in := invalidUTF8JobID
	if err := cs.SendMsg(&in); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	err = cs.RecvMsg(&out)
	if status.Code(err) != codes.InvalidArgument || len(fieldViolations(err)) != 1 || fieldViolations(err)[0] != "job_id" {
		t.Errorf("WatchJob with invalid UTF-8 in job_id: %v (fields %v); want INVALID_ARGUMENT on job_id", err, fieldViolations(err))
	}
}

// requestTypes are the request messages of every method of the three
// services.
func requestTypes(tb testing.TB) []protoreflect.MessageType {
	tb.Helper()
	var out []protoreflect.MessageType
	for _, svc := range []string{"leasehold.v1.JobService", "leasehold.v1.WorkerService", "leasehold.v1.AdminService"} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			tb.Fatal(err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(methods.Get(i).Input().FullName())
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, mt)
		}
	}
	return out
}

// FuzzRequestCodec: arbitrary bytes as any request message of the API.
// The codec never fails and never panics; it decodes exactly what
// protobuf decodes, and everything else is noted and answered
// INVALID_ARGUMENT with one field violation, after which nothing is left
// noted.
func FuzzRequestCodec(f *testing.F) {
	types := requestTypes(f)
	codec := newRequestCodec()
	for i := range types {
		f.Add(uint16(i), []byte{})
		f.Add(uint16(i), invalidUTF8JobID)
	}
	f.Add(uint16(0), []byte{0x0a, 0x7f})
	b, _ := proto.Marshal(&leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q\xff", Kind: "k"}})
	f.Add(uint16(0), b)
	f.Fuzz(func(t *testing.T, which uint16, data []byte) {
		mt := types[int(which)%len(types)]
		m := mt.New().Interface()
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m); err != nil {
			t.Fatalf("the codec failed: %v", err)
		}
		wantErr := proto.Unmarshal(data, mt.New().Interface())
		err := decodeError(m)
		if wantErr == nil {
			if err != nil {
				t.Fatalf("%s decodes, but the codec noted %v", mt.Descriptor().FullName(), err)
			}
			return
		}
		if status.Code(err) != codes.InvalidArgument || len(fieldViolations(err)) != 1 {
			t.Fatalf("%s does not decode (%v); the answer is %v, want INVALID_ARGUMENT with one field violation", mt.Descriptor().FullName(), wantErr, err)
		}
		if decodeError(m) != nil {
			t.Fatal("the error was noted twice")
		}
	})
}
