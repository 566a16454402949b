package main

// What every command that talks to a coordinator shares: the global
// connection and output flags, the connection itself (through the SDK's
// worker.Client), and how a failed call is described to an operator.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/worker"
)

// Connection defaults and the environment variables that override them. A
// flag given on the command line wins over the environment.
const (
	addrDefault    = listenDefault
	timeoutDefault = 30 * time.Second
	outputTable    = "table"
	outputJSON     = "json"

	envAddr    = "LEASEHOLD_ADDR"
	envTimeout = "LEASEHOLD_TIMEOUT"
	envOutput  = "LEASEHOLD_OUTPUT"
)

// The TLS flags and the API key of every command that talks to a
// coordinator, with the SDK's environment variables (worker.Env*) as
// defaults. The API key has no flag on purpose: a flag's value shows in
// ps and shell history.
type tlsFlags struct {
	on         bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	apiKey     string // LEASEHOLD_API_KEY
}

// globalFlags are the connection and output flags of every command that
// talks to a coordinator. They are persistent flags of the root command, so
// they may come before or after the command.
type globalFlags struct {
	addr    string
	timeout time.Duration
	output  string
	tls     tlsFlags

	// envErr is a bad LEASEHOLD_TIMEOUT, reported as a usage error by
	// check unless --timeout overrides it.
	envErr error
}

// register adds the flags to root as persistent flags, their defaults
// taken from the environment.
func (f *globalFlags) register(root *cobra.Command, getenv func(string) string) {
	timeout := timeoutDefault
	if v := getenv(envTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			f.envErr = fmt.Errorf("%s=%q is not a duration (e.g. 10s)", envTimeout, v)
		} else {
			timeout = d
		}
	}
	fs := root.PersistentFlags()
	fs.StringVar(&f.addr, "addr", cmp.Or(getenv(envAddr), addrDefault), "coordinator address host:port (env "+envAddr+")")
	fs.DurationVar(&f.timeout, "timeout", timeout, "deadline for each call; 0 = none (env "+envTimeout+")")
	fs.StringVar(&f.output, "output", cmp.Or(strings.ToLower(getenv(envOutput)), outputTable), "output format: table or json (env "+envOutput+")")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputTable, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	env := worker.DialConfigFromEnv(getenv)
	fs.BoolVar(&f.tls.on, "tls", env.TLS, "connect with TLS, trusting the system roots unless --tls-ca-file (env "+worker.EnvTLS+")")
	fs.StringVar(&f.tls.caFile, "tls-ca-file", env.CAFile, "PEM CA bundle to verify the coordinator with; implies --tls (env "+worker.EnvTLSCAFile+")")
	fs.StringVar(&f.tls.certFile, "tls-cert-file", env.CertFile, "client certificate for mTLS; implies --tls (env "+worker.EnvTLSCertFile+")")
	fs.StringVar(&f.tls.keyFile, "tls-key-file", env.KeyFile, "client certificate's key (env "+worker.EnvTLSKeyFile+")")
	fs.StringVar(&f.tls.serverName, "tls-server-name", env.ServerName, "name to verify the coordinator's certificate against (env "+worker.EnvTLSServerName+")")
	f.tls.apiKey = env.APIKey
}

// dialConfig is how to reach --addr: TLS per the flags, the API key from
// LEASEHOLD_API_KEY.
func (f *globalFlags) dialConfig() worker.DialConfig {
	return worker.DialConfig{
		TLS: f.tls.on, CAFile: f.tls.caFile, CertFile: f.tls.certFile, KeyFile: f.tls.keyFile,
		ServerName: f.tls.serverName, APIKey: f.tls.apiKey,
	}
}

// check validates the flags once they are parsed for cmd.
func (f *globalFlags) check(cmd *cobra.Command) error {
	if f.envErr != nil && !cmd.Flags().Changed("timeout") {
		return usagef("%v", f.envErr)
	}
	switch f.output {
	case outputTable, outputJSON:
	default:
		return usagef("--output must be table or json, not %q", f.output)
	}
	if f.timeout < 0 {
		return usagef("--timeout must not be negative")
	}
	if (f.tls.certFile == "") != (f.tls.keyFile == "") {
		return usagef("--tls-cert-file and --tls-key-file go together")
	}
	return nil
}

// withoutGlobalFlags marks a command that neither connects to a coordinator
// nor prints results (serve, migrate): its help leaves the global flags
// out, and it refuses them, since one given to it is a mistake (serve
// --addr for --listen, most likely), not a no-op.
func withoutGlobalFlags(cmd *cobra.Command) *cobra.Command {
	cmd.Annotations = map[string]string{annotationGlobalFlags: "no"}
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		for _, name := range []string{"addr", "timeout", "output", "tls", "tls-ca-file", "tls-server-name"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s is for the commands that talk to a coordinator; %s does not take it", name, cmd.Name())
			}
		}
		return nil
	}
	return cmd
}

// annotationGlobalFlags is "no" on the commands of withoutGlobalFlags; the
// usage template reads it.
const annotationGlobalFlags = "leasehold/global-flags"

// dial opens a connection to --addr, with TLS and the API key as
// configured, through the SDK's dial options (its calls are traced when
// telemetry is on). grpc.NewClient does not connect until the first call, so an
// unreachable coordinator surfaces as UNAVAILABLE from that call and is
// described by describeError.
func (c *cli) dial() (*grpc.ClientConn, error) {
	opts, err := worker.DialOptions(c.global.dialConfig())
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(c.global.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.global.addr, err)
	}
	return conn, nil
}

// call is the body of an operator command: it dials --addr and runs fn
// with the SDK client, a context bounded by --timeout and the printer for
// --output.
func (c *cli) call(cmd *cobra.Command, fn func(ctx context.Context, client *worker.Client, out *printer) error) error {
	return c.callWithin(cmd, c.global.timeout, fn)
}

// follow is call for a command that lasts as long as what it follows (job
// watch): the default timeout would cut it short, so only an explicit
// --timeout bounds it.
func (c *cli) follow(cmd *cobra.Command, fn func(ctx context.Context, client *worker.Client, out *printer) error) error {
	var timeout time.Duration
	if cmd.Flags().Changed("timeout") {
		timeout = c.global.timeout
	}
	return c.callWithin(cmd, timeout, fn)
}

func (c *cli) callWithin(cmd *cobra.Command, timeout time.Duration, fn func(context.Context, *worker.Client, *printer) error) error {
	ctx, endTrace, err := c.traceCommand(cmd, serviceNameCLI)
	if err != nil {
		return err
	}
	defer endTrace()
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	cancel := context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	return fn(ctx, worker.NewClient(conn), c.printer())
}

// describeError renders an error for an operator: for a gRPC status, the
// canonical code name, the message, the ErrorInfo reason and any field
// violations, plus a hint for the two failures that are about the client's
// own setup (unreachable address, deadline).
func describeError(err error, addr string) string {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return err.Error()
	}
	st := se.GRPCStatus()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", codeName(st.Code()), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Fprintf(&b, "\n  reason: %s", d.GetReason())
			if len(d.GetMetadata()) > 0 {
				keys := make([]string, 0, len(d.GetMetadata()))
				for k := range d.GetMetadata() {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(&b, "\n  %s: %s", k, d.GetMetadata()[k])
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  field %s: %s", v.GetField(), v.GetDescription())
			}
		case *errdetails.RetryInfo:
			if d.GetRetryDelay() != nil {
				fmt.Fprintf(&b, "\n  retry after: %s", d.GetRetryDelay().AsDuration())
			}
		}
	}
	var he *hintedError
	if errors.As(err, &he) && !strings.Contains(st.Message(), he.hint) {
		fmt.Fprintf(&b, "\n  %s", he.hint)
	}
	switch st.Code() {
	case codes.Unauthenticated:
		fmt.Fprintf(&b, "\n  set %s to an API key (leasehold key create), or use a client certificate (--tls-cert-file)", worker.EnvAPIKey)
	case codes.Unavailable:
		fmt.Fprintf(&b, "\n  is the coordinator running at %s? (set --addr or %s; --tls or --tls-ca-file if it serves TLS)", addr, envAddr)
	case codes.DeadlineExceeded:
		fmt.Fprintf(&b, "\n  the call took longer than --timeout")
	default:
		// other codes: the status message says it all
	}
	return b.String()
}

// hintedError adds an explanation for the operator to a server's error
// while keeping the status (and so the printed code) reachable.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *hintedError) Unwrap() error { return e.err }

// codeName is the canonical upper-case name of a gRPC code ("NOT_FOUND"),
// the spelling in the gRPC docs and in grpcurl's output.
func codeName(c codes.Code) string {
	if name, ok := code.Code_name[int32(c)]; ok {
		return name
	}
	return "CODE_" + strconv.Itoa(int(c))
}

// commaList is a repeatable flag whose every use may also hold a
// comma-separated list ("--state queued,leased --state dead"); blanks
// around items and empty items are dropped.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }
func (l *commaList) Type() string   { return "strings" }

func (l *commaList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseKeyValues parses repeated "key=value" flags (--meta). The value may
// contain "="; the key may not be empty and may not repeat.
func parseKeyValues(flagName string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--%s %q: want key=value", flagName, p)
		}
		if k == "" {
			return nil, fmt.Errorf("--%s %q: the key is empty", flagName, p)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("--%s: key %q given twice", flagName, k)
		}
		m[k] = v
	}
	return m, nil
}
