package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/server"
)

// drainTimeout bounds --drain-to's moves after SIGTERM.
const drainTimeout = 5 * time.Minute

// drainThenStop runs the servers until ctx ends, then moves every session
// to the servers targets names before stopping them: the listeners stay
// open meanwhile.
func drainThenStop(ctx context.Context, srv *server.Server, targets func(context.Context) ([]string, error), log *slog.Logger, runs []func(context.Context) error) error {
	serving, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-serving.Done():
			return
		case <-ctx.Done():
		}
		defer stop()
		if len(srv.Sessions()) == 0 {
			log.Info("drained: no session to move")
			return
		}
		dctx, cancel := context.WithTimeout(serving, drainTimeout)
		defer cancel()
		to, err := targets(dctx)
		if err != nil {
			log.Error("draining: no server to move the sessions to; they end with the server", "err", err)
			return
		}
		log.Info("draining: moving every session", "targets", strings.Join(to, ","))
		if err := srv.Drain(dctx, to); err != nil {
			log.Error("draining: sessions left behind end with the server", "err", err)
		} else {
			log.Info("drained")
		}
	}()
	return runAll(serving, runs)
}

// discovery is what the --nomad-* flags say, for --drain-to pool.
type discovery struct {
	addr, service, namespace, tokenFile string
	// self is this server's --listen address, left out of the targets.
	self string
	tls  *tls.Config // --tls-ca-file's, for the probes
}

// poolTargets checks the discovery flags and returns what finds the
// pool's other servers when the drain starts: the Nomad service's
// instances (but this allocation's, NOMAD_ALLOC_ID, and self) that answer
// a probe, in the pool's order.
func poolTargets(secret []byte, d discovery, log *slog.Logger) (func(context.Context) ([]string, error), error) {
	cfg := pool.Config{
		Discover:     true,
		Service:      d.service,
		Namespace:    cmp.Or(d.namespace, os.Getenv("NOMAD_NAMESPACE"), pool.DefaultNomadNamespace),
		NomadAddr:    cmp.Or(d.addr, os.Getenv("NOMAD_ADDR"), pool.DefaultNomadAddr),
		NomadToken:   os.Getenv("NOMAD_TOKEN"),
		ExcludeAlloc: os.Getenv("NOMAD_ALLOC_ID"),
		Secret:       secret,
		TLS:          d.tls,
		Identity:     "gpumux-remoted/drain",
	}
	if u, err := url.Parse(cfg.NomadAddr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--nomad-addr %q: want the Nomad agent's HTTP address, e.g. %s", cfg.NomadAddr, pool.DefaultNomadAddr)
	}
	if d.service == "" {
		return nil, fmt.Errorf("--nomad-service: empty; the pool's servers register %q by default", pool.DefaultService)
	}
	if d.tokenFile != "" {
		b, err := os.ReadFile(d.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--nomad-token-file: %w", err)
		}
		cfg.NomadToken = strings.TrimSpace(string(b))
	}
	p, err := pool.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--drain-to pool: %w", err)
	}
	return func(ctx context.Context) ([]string, error) {
		sc := p.Scan(ctx)
		for _, err := range sc.Problems {
			log.Warn("draining: looking for the pool's servers", "err", err)
		}
		var out []string
		for addr, err := range sc.Down {
			log.Warn("draining: a server of the pool did not answer; not moving sessions there", "server", addr, "err", err)
		}
		for _, addr := range sc.Servers {
			if _, down := sc.Down[addr]; !down && addr != d.self {
				out = append(out, addr)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no other server of the pool answered (Nomad service %q in namespace %q at %s)", cfg.Service, cfg.Namespace, cfg.NomadAddr)
		}
		return out, nil
	}, nil
}
