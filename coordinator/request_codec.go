package coordinator

import (
	"context"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// requestCodec is the server's proto codec with one change: a request
// that does not decode (invalid UTF-8 in a string field, malformed wire
// bytes) is the caller's mistake, INVALID_ARGUMENT with a field violation,
// where grpc-go would answer INTERNAL for any codec error. grpc-go turns
// every codec error into INTERNAL before an interceptor can see it, so the
// codec does not fail: it leaves the message empty and notes the error,
// and checkDecoded (the unary interceptor and the stream wrapper, right
// after authentication, so an unauthenticated caller is still told that
// first) answers it before anything reads the message.
type requestCodec struct {
	encoding.CodecV2
}

// undecodable holds the decoding error of each message requestCodec could
// not decode, until checkDecoded takes it. Every decoded request reaches
// checkDecoded (unary calls through the interceptor chain, stream messages
// through the wrapped stream; forgetUndecodable drops the note of a unary
// call refused before it is checked), so entries do not outlive their
// call.
var undecodable sync.Map // proto.Message → error

func newRequestCodec() requestCodec {
	return requestCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	st := undecodableStatus(err, m.ProtoReflect().Descriptor(), data.Materialize())
	proto.Reset(m)
	undecodable.Store(m, st)
	return nil
}

// decodeError returns the error noted for m by requestCodec, as a status,
// and forgets it; nil when m decoded.
func decodeError(m any) error {
	err, ok := undecodable.LoadAndDelete(m)
	if !ok {
		return nil
	}
	return err.(error) //nolint:forcetypeassert // only errors are stored
}

// undecodableStatus is INVALID_ARGUMENT naming the first string field
// whose bytes are not UTF-8 (a dotted path: "job.queue"), or "request"
// when the bytes are no message of this type at all.
func undecodableStatus(err error, md protoreflect.MessageDescriptor, data []byte) error {
	if strings.Contains(err.Error(), "UTF-8") {
		if field := invalidUTF8Field(md, data, ""); field != "" {
			return invalidArgument(field, "must be valid UTF-8")
		}
	}
	return invalidArgument("request", "does not decode as this method's request message")
}

// invalidUTF8Field walks the wire bytes of a message of md and returns the
// path of the first string field that is not valid UTF-8, or "".
func invalidUTF8Field(md protoreflect.MessageDescriptor, b []byte, prefix string) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		name := prefix + string(fd.Name())
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return name
			}
		case protoreflect.MessageKind:
			if f := invalidUTF8Field(fd.Message(), v, name+"."); f != "" {
				return f
			}
		default:
		}
	}
	return ""
}

// forgetUndecodable is the outermost unary interceptor: a call refused
// before checkDecodedUnary ran (a rate limit, a failed authentication)
// leaves its note behind otherwise, and the map would grow with every
// such call.
func forgetUndecodable(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer undecodable.Delete(req)
	return h(ctx, req)
}

// checkDecodedUnary answers a unary request requestCodec could not decode.
func checkDecodedUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := decodeError(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// checkDecodedStream wraps the stream so that each message requestCodec
// could not decode ends RecvMsg with its INVALID_ARGUMENT.
func checkDecodedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, decodedStream{ss})
}

type decodedStream struct{ grpc.ServerStream }

func (s decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return decodeError(m)
}
