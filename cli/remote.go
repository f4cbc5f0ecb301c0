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

	"github.com/gpumux/gpumux/remote/token"
	"github.com/gpumux/gpumux/share"
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
	fs.StringVar(&o.quota, "quota", "", "device memory `limit` in whole MiB, "+share.QuantityRule+"; default: none")
	fs.StringVar(&o.device, "device", "0", "the server's GPU `INDEX`, or several, comma-separated (the container's devices 0, 1, … in this order)")
	fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is accepted")
	return group("remote", "a pool secret for remote GPUs, a token for gpumux-remoted", secret, tok)
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
		mib, err := share.ParseMiB(o.quota)
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
