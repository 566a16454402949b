package worker

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
)

// DialOptions are the options the SDK recommends for grpc.NewClient on a
// connection to a coordinator, to add to your transport credentials:
//
//	opts := append(worker.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
//	conn, err := grpc.NewClient("127.0.0.1:7400", opts...)
//
// They install OpenTelemetry's gRPC client stats handler, so that every
// call is a client span carrying the caller's trace context to the
// coordinator: a producer's CreateJob joins the producer's trace, and a
// worker's unary calls made inside a handler join the handler's. It uses
// otel's global TracerProvider, MeterProvider and propagator, and records
// nothing until an application installs them. The SDK never dials for you,
// so a connection without these options works too; it is just not traced.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler())}
}
