package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/bench/measure"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// workerMode is the hidden mode a worker process runs:
// `leasehold bench worker --addr ADDR --id ID --capacity N [--lease D]
// [--block]`. --block makes the handler hold each job until the worker
// stops (recovery kills such a worker with its leases held).
//
// Its protocol with the bench, one line each way at a time:
//
//   - stdout "ready": connected to the coordinator, handler registered;
//   - stdin "go": start taking work (worker.Run);
//   - stdout "progress N" every progressInterval while N (handler starts so
//     far) changes, so the bench knows when to look at the database;
//   - stdin closed (or SIGTERM): shut down gracefully; then stdout carries
//     "start JOB_ID UNIX_NANOS" per handler start, "ack JOB_ID UNIX_NANOS"
//     per acknowledged Complete, and last "end STARTS ACKS", which tells the
//     bench the list is whole.
const workerMode = "worker"

// Worker protocol words.
const (
	lineReady    = "ready"
	lineGo       = "go"
	lineProgress = "progress"
	lineStart    = "start"
	lineAck      = "ack"
	lineEnd      = "end"
)

const (
	progressInterval   = 20 * time.Millisecond
	workerConnectLimit = 30 * time.Second
	workerGrace        = 5 * time.Second
)

// stamp is one instant of one job on the worker's clock.
type stamp struct {
	id string
	at int64 // unix nanoseconds
}

// recorder keeps the worker's instants. Handlers run concurrently.
type recorder struct {
	mu     sync.Mutex // guards starts and acks
	starts []stamp
	acks   []stamp
	// nStarts mirrors len(starts) for the progress lines.
	nStarts atomic.Int64
}

func (r *recorder) started(id string) {
	at := time.Now().UnixNano()
	r.mu.Lock()
	r.starts = append(r.starts, stamp{id: id, at: at})
	r.mu.Unlock()
	r.nStarts.Add(1)
}

// intercept notes when a Complete was acknowledged: the coordinator answers
// only after the completion committed.
func (r *recorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && method == leaseholdv1.WorkerService_Complete_FullMethodName {
		if cr, ok := req.(*leaseholdv1.CompleteRequest); ok {
			at := time.Now().UnixNano()
			r.mu.Lock()
			r.acks = append(r.acks, stamp{id: cr.GetToken().GetJobId(), at: at})
			r.mu.Unlock()
		}
	}
	return err
}

// lineWriter serialises the protocol lines of the progress goroutine and
// the main one.
type lineWriter struct {
	mu sync.Mutex // guards w
	w  *bufio.Writer
}

func (l *lineWriter) line(format string, args ...any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	return l.w.Flush()
}

func mainWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leasehold bench worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "coordinator address")
	id := fs.String("id", "", "worker id")
	var o workerOptions
	fs.IntVar(&o.capacity, "capacity", capacityDefault, "handlers at once")
	fs.DurationVar(&o.lease, "lease", 0, "lease duration asked for (0: the coordinator's default)")
	fs.BoolVar(&o.block, "block", false, "handlers hold their job until the worker stops")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *addr == "" || *id == "" {
		fmt.Fprintln(stderr, "leasehold bench worker: needs --addr and --id, and no arguments (it is started by leasehold bench)")
		return exitUsage
	}
	o.addr, o.id = *addr, *id
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if dir := os.Getenv(envCPUProfile); dir != "" {
		stop, err := startCPUProfile(filepath.Join(dir, "worker-"+o.id+".pprof"))
		if err != nil {
			fmt.Fprintf(stderr, "leasehold bench worker %s: %v\n", o.id, err)
			return exitFail
		}
		defer stop()
	}
	if err := runWorker(ctx, o, log, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "leasehold bench worker %s: %v\n", o.id, err)
		return exitFail
	}
	return exitOK
}

// workerOptions are a worker process's flags.
type workerOptions struct {
	addr, id string
	capacity int
	lease    time.Duration
	block    bool
}

func runWorker(ctx context.Context, o workerOptions, log *slog.Logger, stdin io.Reader, stdout io.Writer) error {
	addr, id := o.addr, o.id
	rec := &recorder{}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(rec.intercept))
	if err != nil {
		return err
	}
	defer conn.Close()
	// Connect before "ready", so the transport set-up is not measured:
	// River's client has its pool before Start too.
	if err := waitReady(ctx, conn); err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	w, err := worker.New(conn, worker.Config{
		WorkerID:      id,
		Queues:        []string{measure.QueueName},
		Capacity:      o.capacity,
		LeaseDuration: o.lease,
		ShutdownGrace: workerGrace,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	w.HandleAny(func(ctx context.Context, job *worker.Job) ([]byte, error) {
		rec.started(job.ID)
		if o.block {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		return nil, nil
	})

	out := &lineWriter{w: bufio.NewWriter(stdout)}
	if err := out.line(lineReady); err != nil {
		return err
	}
	// stdin: "go" starts the work, its end stops it. When the bench dies
	// the pipe closes, so a worker never outlives it.
	goCh, stopCh := watchStdin(stdin)
	select {
	case <-goCh:
	case <-stopCh:
		return out.line("%s 0 0", lineEnd)
	case <-ctx.Done():
		return out.line("%s 0 0", lineEnd)
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		select {
		case <-stopCh:
			stopRun()
		case <-runCtx.Done():
		}
	}()
	progressDone := reportProgress(runCtx, rec, out)
	runErr := w.Run(runCtx)
	stopRun()
	<-progressDone

	rec.mu.Lock()
	defer rec.mu.Unlock()
	out.mu.Lock()
	for _, s := range rec.starts {
		fmt.Fprintf(out.w, "%s %s %d\n", lineStart, s.id, s.at)
	}
	for _, s := range rec.acks {
		fmt.Fprintf(out.w, "%s %s %d\n", lineAck, s.id, s.at)
	}
	fmt.Fprintf(out.w, "%s %d %d\n", lineEnd, len(rec.starts), len(rec.acks))
	err = out.w.Flush()
	out.mu.Unlock()
	return errors.Join(runErr, err)
}

// watchStdin reads the bench's commands: goCh is closed at the first
// "go", stopCh when stdin ends.
func watchStdin(stdin io.Reader) (goCh, stopCh chan struct{}) {
	goCh, stopCh = make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdin)
		started := false
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == lineGo && !started {
				started = true
				close(goCh)
			}
		}
		close(stopCh)
	}()
	return goCh, stopCh
}

// reportProgress writes the count of started jobs whenever it changed, every
// progressInterval, until ctx ends; the channel is closed when it has
// stopped writing.
func reportProgress(ctx context.Context, rec *recorder, out *lineWriter) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if n := rec.nStarts.Load(); n != last {
					last = n
					if out.line("%s %d", lineProgress, n) != nil {
						return
					}
				}
			}
		}
	}()
	return done
}

// waitReady connects conn and waits until it is READY.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, workerConnectLimit)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return context.Cause(ctx)
		}
	}
	return nil
}

// envCPUProfile names a directory: each worker process writes its CPU
// profile there as worker-ID.pprof (the coordinator's comes from
// LEASEHOLD_PPROF and /debug/pprof/profile).
const envCPUProfile = "LEASEHOLD_BENCH_CPUPROFILE"

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path) //nolint:gosec // the developer names the directory; the worker id is the bench's own
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
