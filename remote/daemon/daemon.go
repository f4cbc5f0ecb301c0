package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/remote/cudabackend"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/server/metrics"
	"github.com/gpumux/gpumux/remote/token"
)

// backendConfig is what the backends' flags say.
type backendConfig struct {
	cudaLib string
	// fake: the fakecuda options the --fake-* flags give.
	fake []fakecuda.Option
}

// backends are the --backend choices.
var backends = map[string]func(backendConfig) (server.Backend, error){
	"cuda": func(c backendConfig) (server.Backend, error) {
		b, err := cudabackend.Open(c.cudaLib)
		if err != nil {
			return nil, err
		}
		return b, nil
	},
	"fake": func(c backendConfig) (server.Backend, error) {
		b, err := fakecuda.New(c.fake...)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return b, nil
	},
}

var backendHelp = map[string]string{
	"cuda": "the server's GPUs through libcuda",
	"fake": "CPU-simulated GPUs, for tests",
}

func backendNames() string {
	var names []string
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range backends {
			if !yield(n) {
				return
			}
		}
	}) {
		names = append(names, fmt.Sprintf("%s (%s)", n, backendHelp[n]))
	}
	return strings.Join(names, ", ")
}

// usageError is a bad command line: exit status 2.
type usageError struct{ error }

// Exit codes of Run.
const (
	ExitOK    = 0 // stopped cleanly (the context ended), or --help or --version
	ExitError = 1 // the server could not start or failed
	ExitUsage = 2 // a bad command line
)

// Run runs gpumux-remoted with its command-line arguments (without the
// program name) until ctx ends, logging on stderr, and returns its exit
// status: 0 after a clean stop, 1 on failure, 2 on a bad command line.
// --version prints the version on stdout.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := serve(ctx, args, stdout, stderr)
	var ue usageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gpumux-remoted: %v\nRun gpumux-remoted --help for usage.\n", err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "gpumux-remoted: %v\n", err)
		return ExitError
	}
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpumux-remoted", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen      = fs.String("listen", "", "serve TCP on `host:port` (e.g. 0.0.0.0:7600)")
		unixPath    = fs.String("unix", "", "serve on a unix socket at `path` (mode 0660, removed on exit)")
		tokenFile   = fs.String("token-file", "", "the pool secret that signs client tokens, a `file` readable only by its owner (required unless --insecure-no-auth)")
		insecure    = fs.Bool("insecure-no-auth", false, "admit every client without a token or quota, and show it every GPU: for tests only")
		backendName = fs.String("backend", "cuda", "`name` of what runs the calls: "+backendNames())
		fakeDevices = fs.Int("fake-devices", fakecuda.DefaultDevices, "number of fake GPUs (--backend fake)")
		fakeMemory  = fs.String("fake-memory", "16GiB", "memory of each fake GPU (--backend fake), a `quantity`: "+quantity.Rule)
		fakeUUIDs   = fs.String("fake-uuids", "", "the fake GPUs' `UUIDs` (--backend fake), comma-separated, written as NVML does (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), one per GPU; without --fake-devices they set the number of GPUs (default: UUIDs derived from the GPU's index, the same on every fake server)")
		maxClients  = fs.Int("max-clients", server.DefaultMaxClients, "logged-in connections served at once, with or without --tenant-processes; more are refused at their handshake (connections still in their handshake do not count)")
		maxTenant   = fs.Int("max-tenant-connections", server.DefaultMaxTenantConnections, "logged-in connections served at once that present one token ID; more are refused at their handshake")
		maxShakes   = fs.Int("max-handshakes", server.DefaultMaxHandshakes, "connections whose handshake is under way at once; one more closes the oldest of them")
		maxPeer     = fs.Int("max-handshakes-per-peer", server.DefaultMaxHandshakesPerPeer, "handshakes under way at once from one peer (an IP address, an IPv6 /64, or a user ID on the unix socket); one more closes that peer's oldest")
		handshake   = fs.Duration("handshake-timeout", server.DefaultHandshakeTimeout, "how long a new connection has to send its handshake")
		busyPoll    = fs.Duration("busy-poll", server.DefaultBusyPoll, "how long a client's worker polls for the client's next call before it sleeps (0 never polls, at most 10ms): a waiting call answered from a polling worker skips a thread wake-up, at the price of that much CPU time after each call")
		cpuProfile  = fs.String("cpu-profile", "", "write a Go CPU profile of the server to `file` until it exits (each tenant worker to file.PID), for `go tool pprof`")
		logLevel    = fs.String("log-level", "info", "log `level`: debug, info, warn or error")
		cudaLib     = fs.String("cuda-lib", cudabackend.DefaultLibrary, "the driver `library` the cuda backend loads")
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus metrics over HTTP on `host:port` at /metrics (e.g. 127.0.0.1:9401; off by default); they count the calls of every tenant worker (docs/remote.md lists them)")
		tenantProcs = fs.Bool("tenant-processes", true, "run each tenant (token ID) in a worker process of its own; contexts of one process share one GPU address space, so only separate processes keep tenants' kernels apart")
		tlsCert     = fs.String("tls-cert-file", "", "serve --listen over TLS with this certificate `file` (PEM, the chain leaf first); reloaded when it changes and on SIGHUP")
		tlsKey      = fs.String("tls-key-file", "", "the `file` holding --tls-cert-file's private key (PEM)")
		tlsClientCA = fs.String("tls-client-ca-file", "", "mutual TLS: accept only clients whose certificate a CA in this `file` (PEM) signed")
		tlsCA       = fs.String("tls-ca-file", "", "trust the CA certificates in this `file` (PEM) when connecting to the other servers of the pool over TLS (a migration's target, --drain-to pool's probes), checking the host of each address; without it those connections are in clear")
		migratable  = fs.Bool("migratable", false, "let sessions move to another server of the pool and come from one (gpumux remote migrate): every cuMemAlloc is backed by virtual memory the target can place at the same addresses")
		drainTo     = fs.String("drain-to", "", "on SIGTERM, move every session to the server at `ADDR` (host:port or unix:PATH, of this pool), or with \"pool\" to other servers of the pool found through Nomad (--nomad-*), before exiting; implies --migratable")
		nomadAddr   = fs.String("nomad-addr", "", "--drain-to pool: the Nomad agent's HTTP API `URL` (default $NOMAD_ADDR, else "+pool.DefaultNomadAddr+")")
		nomadSvc    = fs.String("nomad-service", pool.DefaultService, "--drain-to pool: the Nomad service (provider \"nomad\") the pool's servers register, a `name`")
		nomadNS     = fs.String("nomad-namespace", "", "--drain-to pool: the service's Nomad `namespace` (default $NOMAD_NAMESPACE, else "+pool.DefaultNomadNamespace+")")
		nomadToken  = fs.String("nomad-token-file", "", "--drain-to pool: a `file` holding a Nomad ACL token that may read the service (default $NOMAD_TOKEN, else none)")
		worker      = fs.Bool("tenant-worker", false, "internal: serve the connections handed over descriptor 3 (started by gpumux-remoted itself)")
		showVersion = fs.Bool("version", false, "print the version and exit")
	)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: gpumux-remoted (--listen host:port [--tls-cert-file file --tls-key-file file] | --unix path) (--token-file file | --insecure-no-auth) [flags]

gpumux-remoted serves a GPU's CUDA driver API to gpumux's interposer
(libcuda.so.1 in containers on GPU-less nodes). Each tenant (token ID) runs
in a worker process of its own; a client may touch only its own memory and
objects, and the clients presenting one token share its memory quota. SIGINT or SIGTERM stops the
server: every client is disconnected and everything it held is freed (with
--drain-to, the sessions move to other servers of the pool first).
--listen without --tls-cert-file sends tokens and data in clear; SIGHUP
reloads the TLS files (docs/remote.md, "TLS"). --metrics-addr serves
Prometheus metrics at /metrics and a health check at /healthz (200 "ok"
while the server serves).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *showVersion {
		_, err := fmt.Fprintln(stdout, "gpumux-remoted", version.String())
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if *listen == "" && *unixPath == "" && !*worker {
		return usageError{errors.New("--listen or --unix is required")}
	}
	if *tokenFile != "" && *insecure {
		return usageError{errors.New("--token-file and --insecure-no-auth exclude each other")}
	}
	if *tokenFile == "" && !*insecure {
		return usageError{errors.New("--token-file is required (or --insecure-no-auth, for tests only)")}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)}
	}
	open, known := backends[*backendName]
	if !known {
		return usageError{fmt.Errorf("--backend %q: want one of %s", *backendName, backendNames())}
	}
	if *backendName != "fake" {
		for _, f := range []string{"fake-devices", "fake-memory", "fake-uuids"} {
			if set[f] {
				return usageError{fmt.Errorf("--%s applies only to --backend fake, not %q", f, *backendName)}
			}
		}
	}
	memory, err := quantity.ParseBytes(*fakeMemory)
	if err != nil {
		return usageError{fmt.Errorf("--fake-memory %q: %w", *fakeMemory, err)}
	}
	if *maxClients < 1 {
		return usageError{fmt.Errorf("--max-clients %d: want at least 1", *maxClients)}
	}
	for _, f := range []string{"nomad-addr", "nomad-service", "nomad-namespace", "nomad-token-file"} {
		if set[f] && *drainTo != "pool" {
			return usageError{fmt.Errorf("--%s applies only to --drain-to pool", f)}
		}
	}
	if *maxTenant < 1 {
		return usageError{fmt.Errorf("--max-tenant-connections %d: want at least 1", *maxTenant)}
	}
	if *maxShakes < 1 {
		return usageError{fmt.Errorf("--max-handshakes %d: want at least 1", *maxShakes)}
	}
	if *maxPeer < 1 {
		return usageError{fmt.Errorf("--max-handshakes-per-peer %d: want at least 1", *maxPeer)}
	}
	if *handshake <= 0 {
		return usageError{fmt.Errorf("--handshake-timeout %v: want more than 0", *handshake)}
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usageError{errors.New("--tls-cert-file and --tls-key-file go together")}
	}
	if *tlsClientCA != "" && *tlsCert == "" {
		return usageError{errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")}
	}
	if *tlsCert != "" && *listen == "" && !*worker {
		return usageError{errors.New("--tls-cert-file applies to --listen (a unix socket needs no TLS)")}
	}
	var poolTLS *tls.Config
	if *tlsCA != "" {
		if !*migratable && *drainTo == "" {
			return usageError{errors.New("--tls-ca-file applies to --migratable and --drain-to (the connections to the pool's other servers)")}
		}
		var err error
		if poolTLS, err = pool.ClientTLS(*tlsCA, ""); err != nil {
			return usageError{fmt.Errorf("--tls-ca-file: %w", err)}
		}
	}
	if *busyPoll < 0 || *busyPoll > server.MaxBusyPoll {
		return usageError{fmt.Errorf("--busy-poll %v: want 0 to %v", *busyPoll, server.MaxBusyPoll)}
	}
	var metricsLn net.Listener
	if *metricsAddr != "" && !*worker { // workers get the front's flags
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return usageError{fmt.Errorf("--metrics-addr %q: %w", *metricsAddr, err)}
		}
		defer metricsLn.Close() // once served, closed already
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := []server.Option{server.WithLogger(log), server.WithMaxClients(*maxClients), server.WithMaxTenantConnections(*maxTenant),
		server.WithMaxHandshakes(*maxShakes),
		server.WithMaxHandshakesPerPeer(*maxPeer), server.WithHandshakeTimeout(*handshake), server.WithBusyPoll(*busyPoll)}
	targets := func(context.Context) ([]string, error) { return []string{*drainTo}, nil }
	if *insecure && *drainTo == "pool" {
		return usageError{errors.New("--drain-to pool needs --token-file: the pool secret signs the probes of the other servers")}
	}
	if *insecure {
		if !*worker {
			fmt.Fprintln(stderr, "gpumux-remoted: WARNING: --insecure-no-auth: ANY client that can reach this server gets the GPUs, without a token or quota. Use it for tests only.")
		}
		opts = append(opts, server.WithInsecureNoAuth())
	} else {
		secret, err := token.ReadSecret(*tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, server.WithSecret(secret))
		if *drainTo == "pool" {
			if targets, err = poolTargets(secret, discovery{addr: *nomadAddr, service: *nomadSvc, namespace: *nomadNS, tokenFile: *nomadToken, self: *listen, tls: poolTLS}, log); err != nil {
				return usageError{err}
			}
		}
	}
	fake := []fakecuda.Option{fakecuda.WithMemory(memory)}
	if set["fake-devices"] || !set["fake-uuids"] {
		fake = append(fake, fakecuda.WithDevices(*fakeDevices))
	}
	if set["fake-uuids"] {
		fake = append(fake, fakecuda.WithUUIDs(strings.Split(*fakeUUIDs, ",")...))
		if _, err := fakecuda.New(fake...); err != nil {
			return usageError{fmt.Errorf("--fake-uuids %q: %w", *fakeUUIDs, err)}
		}
	}
	be, err := open(backendConfig{cudaLib: *cudaLib, fake: fake})
	if err != nil {
		return fmt.Errorf("backend %s: %w", *backendName, err)
	}
	if *cpuProfile != "" {
		path := *cpuProfile
		if *worker {
			path += "." + strconv.Itoa(os.Getpid())
		}
		stop, err := startCPUProfile(path)
		if err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer stop()
	}
	if *migratable || *drainTo != "" {
		// A tenant worker's too: it holds the sessions that move.
		opts = append(opts, server.WithMigration(), server.WithPoolTLS(poolTLS))
	}
	if *worker {
		f := os.NewFile(server.TenantFD, "tenant-ctrl")
		c, err := net.FileConn(f)
		f.Close()
		ctrl, ok := c.(*net.UnixConn)
		if err != nil || !ok {
			return fmt.Errorf("--tenant-worker: descriptor %d is not the front's control socket (%v)", server.TenantFD, err)
		}
		// The front governs a worker's life (it closes the control
		// socket; the worker dies with it): a SIGTERM or ^C that reaches
		// the process group must not end the sessions that a front with
		// --drain-to is about to move.
		return server.New(be, opts...).ServeTenant(context.WithoutCancel(ctx), ctrl)
	}
	if *tenantProcs {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--tenant-processes: %w", err)
		}
		workerArgs := append(slices.Clone(args), "--tenant-worker")
		opts = append(opts, server.WithTenantProcesses(func() *exec.Cmd {
			cmd := exec.Command(exe, workerArgs...)
			cmd.Stderr = stderr
			return cmd
		}))
	}

	var tlsFiles *server.TLSFiles
	if *tlsCert != "" {
		if tlsFiles, err = server.LoadTLS(server.TLSPaths{Cert: *tlsCert, Key: *tlsKey, ClientCA: *tlsClientCA}, log); err != nil {
			return err
		}
	} else if *listen != "" {
		fmt.Fprintln(stderr, "gpumux-remoted: WARNING: --listen without --tls-cert-file: tokens and CUDA data cross the network in clear; anyone on the path can read them and use the tokens. Serve TLS, or listen on loopback or --unix only.")
	}
	srv := server.New(be, opts...)
	var runs []func(context.Context) error
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", *listen, err)
		}
		lns = append(lns, ln)
		if tlsFiles != nil {
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			runs = append(runs, func(ctx context.Context) error { return srv.ServeTLS(ctx, ln, tlsFiles.Config()) },
				func(ctx context.Context) error { reloadOn(ctx, hup, tlsFiles, log); return nil })
		} else {
			runs = append(runs, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
		}
	}
	if *unixPath != "" {
		ln, err := server.ListenUnix(*unixPath, 0o660)
		if err != nil {
			closeAll()
			return fmt.Errorf("--unix: %w", err)
		}
		lns = append(lns, ln)
		runs = append(runs, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	}
	if metricsLn != nil {
		log.Info("serving metrics", "url", "http://"+metricsLn.Addr().String()+"/metrics")
		runs = append(runs, func(ctx context.Context) error { return metrics.Serve(ctx, metricsLn, srv) })
	}
	if *drainTo != "" {
		return drainThenStop(ctx, srv, targets, log, runs)
	}
	return runAll(ctx, runs)
}

// reloadOn reloads the TLS files at every signal on hup until ctx ends.
func reloadOn(ctx context.Context, hup <-chan os.Signal, f *server.TLSFiles, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := f.Reload(); err != nil {
				log.Error("SIGHUP: TLS files not reloaded; serving with those read before", "err", err)
				continue
			}
			log.Info("SIGHUP: TLS files reloaded")
		}
	}
}

// runAll runs every server until ctx ends or one fails.
func runAll(ctx context.Context, runs []func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Go(func() {
			errs[i] = run(ctx)
			cancel()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// startCPUProfile profiles the process into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
