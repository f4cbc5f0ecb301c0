package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpumux/gpumux/remote/token"
	"github.com/gpumux/gpumux/share"
)

const remoteUsage = `Usage: gpumux remote secret|token [flags]

  secret   print a new pool secret: put it, mode 0600, in gpumux-remoted's
           --token-file on GPU servers and in the plugin's remote.token_file
           on client nodes
  token    print a token that gpumux-remoted accepts (GPUMUX_REMOTE_TOKEN),
           for a container started by hand; Nomad tasks and gpumux-runtime
           containers get one per reservation
`

func runRemote(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, remoteUsage)
		return ExitUsage
	}
	switch args[0] {
	case "secret":
		s, err := token.NewSecret()
		if err != nil {
			fmt.Fprintf(stderr, "gpumux remote secret: %v\n", err)
			return ExitError
		}
		fmt.Fprintln(stdout, s)
		return ExitOK
	case "token":
		return runRemoteToken(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, remoteUsage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "gpumux remote: unknown command %q\n\n%s", args[0], remoteUsage)
	return ExitUsage
}

func runRemoteToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("remote token", flag.ContinueOnError)
	secretFile := fs.String("secret-file", "", "the pool secret `FILE` (mode 0600); required")
	id := fs.String("id", "", "reservation `ID`: connections with the same ID share the quota (default: manual-<host>-<time>)")
	quota := fs.String("quota", "", "device memory `limit` in whole MiB, "+share.QuantityRule+"; default: none")
	device := fs.String("device", "0", "the server's GPU `INDEX`, or several, comma-separated (the container's devices 0, 1, … in this order)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is accepted")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: gpumux remote token --secret-file FILE [flags]\n\nPrints a token for gpumux-remoted (GPUMUX_REMOTE_TOKEN).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *secretFile == "" {
		fmt.Fprintln(stderr, "gpumux remote token: --secret-file is required")
		return ExitUsage
	}
	if *ttl <= 0 {
		fmt.Fprintf(stderr, "gpumux remote token: --ttl %v: want a positive duration\n", *ttl)
		return ExitUsage
	}
	var quotaBytes uint64
	if *quota != "" {
		mib, err := share.ParseMiB(*quota)
		if err == nil && mib == 0 {
			err = errors.New("must be at least 1Mi (leave --quota out for no limit)")
		}
		if err != nil {
			fmt.Fprintf(stderr, "gpumux remote token: --quota %q: %v\n", *quota, err)
			return ExitUsage
		}
		quotaBytes = mib << 20
	}
	devs, err := parseDevices(*device)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote token: --device %q: %v\n", *device, err)
		return ExitUsage
	}
	secret, err := token.ReadSecret(*secretFile)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux remote token: %v\n", err)
		return ExitError
	}
	now := time.Now()
	if *id == "" {
		host, _ := os.Hostname()
		*id = fmt.Sprintf("manual-%s-%d", host, now.UnixNano())
	}
	tok, err := token.Mint(secret, token.Claims{ID: *id, Quota: quotaBytes, Device: devs[0], MoreDevices: devs[1:], Expires: now.Add(*ttl)})
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
