package coordinator

import (
	"context"

	"google.golang.org/grpc"
)

// tenantKey is the typed context key of the caller's tenant. An unexported
// struct type cannot collide with another package's key.
type tenantKey struct{}

// withTenant returns ctx carrying tenant.
func withTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// tenantFrom returns the tenant the interceptors put in ctx. A context
// without one (a handler reached without the interceptor chain) yields "",
// which every store call rejects as invalid rather than guessing a tenant.
func tenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// tenantUnary stands in for authentication: every call runs as the
// configured tenant. The security work replaces it with a per-caller
// identity; handlers already read the tenant only from the context.
func tenantUnary(tenant string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(withTenant(ctx, tenant), req)
	}
}

// tenantStream is tenantUnary for streams.
func tenantStream(tenant string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &ctxStream{ServerStream: ss, ctx: withTenant(ss.Context(), tenant)})
	}
}

// ctxStream replaces a server stream's context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
