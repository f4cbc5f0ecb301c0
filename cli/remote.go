package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

func newRemoteCmd(stdout, stderr io.Writer) *cobra.Command {
	secret := leaf("secret", "print a new pool secret", `
Prints a new pool secret: put it, mode 0600, in gpumux-remoted's
--token-file on GPU servers and in the plugin's remote.token_file on client
nodes.`, func(context.Context) int {
		s, err := token.NewSecret()
		if err != nil {
			fmt.Fprintf(stderr, "gpumux remote secret: %v\n", err)
			return ExitError
		}
		fmt.Fprintln(stdout, s)
		return ExitOK
	})
	var o remoteTokenOptions
	tok := leaf("token --secret-file FILE", "print a token for gpumux-remoted (GPUMUX_REMOTE_TOKEN)", `
Prints a token that gpumux-remoted accepts (GPUMUX_REMOTE_TOKEN), for a
container started by hand; Nomad tasks and gpumux-runtime containers get one
per reservation.

Exit codes: 0 ok, 1 error (the secret file unreadable), 2 bad flags.`, func(context.Context) int { return runRemoteToken(&o, stdout, stderr) })
	fs := tok.Flags()
	fs.StringVar(&o.secretFile, "secret-file", "", "the pool secret `FILE` (mode 0600); required")
	fs.StringVar(&o.id, "id", "", "reservation `ID`: connections with the same ID share the quota (default: manual-<host>-<time>)")
	fs.StringVar(&o.quota, "quota", "", "device memory `limit` in whole MiB, "+quantity.Rule+"; default: none")
	fs.StringVar(&o.device, "device", "0", "the server's GPU `INDEX`, or several, comma-separated (the container's devices 0, 1, … in this order)")
	fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is accepted")
	var m remoteMigrateOptions
	mig := leaf("migrate --from ADDR --session ID|--tenant ID --to ADDR --secret-file FILE", "move live sessions from one gpumux-remoted to another", `
Moves a session (--session, its connection number in gpumux-remoted's log)
or every session of a reservation (--tenant, its token ID) from the server at
--from to the server at --to, both of one pool (--secret-file, the pool
secret, signs the request). Each session moves at its program's next
synchronous CUDA call; the program sees a pause, no error. Both servers run
with --migratable; a session that cannot move (docs/remote.md says which)
stays where it was, and the command says why. ADDR is host:port, or unix:PATH.

Exit codes: 0 every session moved, 1 a migration failed (the session runs on
where it was), 2 bad flags.`, func(ctx context.Context) int { return runRemoteMigrate(ctx, &m, stdout, stderr) })
	fs = mig.Flags()
	fs.StringVar(&m.from, "from", "", "the `ADDR` of the server the sessions are on; required")
	fs.StringVar(&m.to, "to", "", "the `ADDR` of the server they move to; required")
	fs.Uint64Var(&m.session, "session", 0, "the session's connection `NUMBER` (\"conn\" in the server's log)")
	fs.StringVar(&m.tenant, "tenant", "", "move every session of this token `ID` instead")
	fs.StringVar(&m.secretFile, "secret-file", "", "the pool secret `FILE` (mode 0600); required")
	fs.DurationVar(&m.timeout, "timeout", 10*time.Minute, "how long to wait for the sessions' next calls and their transfer")
	fs.StringVar(&m.tlsCA, "tls-ca-file", "", "reach --from over TLS, trusting the CA certificates in this `FILE` (PEM); the servers need their own --tls-ca-file to reach each other")
	return group("remote", "a pool secret for remote GPUs, a token for gpumux-remoted, live migration", secret, tok, mig)
}

// remoteMigrateOptions are gpumux remote migrate's flags.
type remoteMigrateOptions struct {
	from, to, tenant, secretFile, tlsCA string
	session                             uint64
	timeout                             time.Duration
}

func runRemoteMigrate(ctx context.Context, o *remoteMigrateOptions, stdout, stderr io.Writer) int {
	switch {
	case o.from == "" || o.to == "" || o.secretFile == "":
		fmt.Fprintln(stderr, "gpumux remote migrate: --from, --to and --secret-file are required")
		return ExitUsage
	case (o.session == 0) == (o.tenant == ""):
		fmt.Fprintln(stderr, "gpumux remote migrate: name one of --session and --tenant")
		return ExitUsage
	case o.timeout <= 0:
		fmt.Fprintf(stderr, "gpumux remote migrate: --timeout %v: want a positive duration\n", o.timeout)
		return ExitUsage
	}
	secret, err := token.ReadSecret(o.secretFile)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote migrate: %v\n", err)
		return ExitError
	}
	var opts []control.Option
	if o.tlsCA != "" {
		cfg, err := pool.ClientTLS(o.tlsCA, "")
		if err != nil {
			fmt.Fprintf(stderr, "gpumux remote migrate: --tls-ca-file: %v\n", err)
			return ExitUsage
		}
		opts = append(opts, control.WithTLS(cfg))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cc, err := control.Dial(ctx, o.from, secret,
		proto.Control{Kind: proto.ControlMigrate, Session: o.session, Tenant: o.tenant, Target: o.to}, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote migrate: %v\n", err)
		return ExitError
	}
	defer cc.Close()
	rep, err := cc.Reply()
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote migrate: %s: %v\n", o.from, err)
		return ExitError
	}
	for _, id := range rep.Moved {
		fmt.Fprintf(stdout, "moved session %d from %s to %s\n", id, o.from, o.to)
	}
	if rep.Result != proto.Success {
		fmt.Fprintf(stderr, "gpumux remote migrate: %s: %v\n", rep.Result, rep.Message)
		return ExitError
	}
	return ExitOK
}

// remoteTokenOptions are gpumux remote token's flags.
type remoteTokenOptions struct {
	secretFile, id, quota, device string
	ttl                           time.Duration
}

func runRemoteToken(o *remoteTokenOptions, stdout, stderr io.Writer) int {
	if o.secretFile == "" {
		fmt.Fprintln(stderr, "gpumux remote token: --secret-file is required")
		return ExitUsage
	}
	if o.ttl <= 0 {
		fmt.Fprintf(stderr, "gpumux remote token: --ttl %v: want a positive duration\n", o.ttl)
		return ExitUsage
	}
	var quotaBytes uint64
	if o.quota != "" {
		mib, err := quantity.ParseMiB(o.quota)
		if err == nil && mib == 0 {
			err = errors.New("must be at least 1Mi (leave --quota out for no limit)")
		}
		if err != nil {
			fmt.Fprintf(stderr, "gpumux remote token: --quota %q: %v\n", o.quota, err)
			return ExitUsage
		}
		quotaBytes = mib << 20
	}
	devs, err := parseDevices(o.device)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote token: --device %q: %v\n", o.device, err)
		return ExitUsage
	}
	secret, err := token.ReadSecret(o.secretFile)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote token: %v\n", err)
		return ExitError
	}
	now := time.Now()
	id := o.id
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("manual-%s-%d", host, now.UnixNano())
	}
	tok, err := token.Mint(secret, token.Claims{ID: id, Quota: quotaBytes, Device: devs[0], MoreDevices: devs[1:], Expires: now.Add(o.ttl)})
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote token: %v\n", err)
		return ExitUsage
	}
	fmt.Fprintln(stdout, tok)
	return ExitOK
}

// parseDevices reads --device: GPU indexes, comma-separated.
func parseDevices(s string) ([]int, error) {
	var devs []int
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, errors.New("want GPU indexes, comma-separated")
		}
		devs = append(devs, d)
	}
	return devs, nil
}
