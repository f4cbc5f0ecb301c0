package nomadagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// ValidateJobFile runs `nomad job validate path` with this agent's Nomad
// binary against this agent (NOMAD_ADDR), as an operator would: the
// command parses the file and has the server validate the job. It returns
// the command's output, and an error when it exits non-zero.
func (a *Agent) ValidateJobFile(ctx context.Context, path string) (string, error) {
	cmd := exec.CommandContext(ctx, a.cfg.bin, "job", "validate", path)
	if a.cfg.netns != nil {
		cmd = exec.CommandContext(ctx, "nsenter", "--net="+a.cfg.netns.Path, "--", a.cfg.bin, "job", "validate", path)
	}
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+a.HTTPAddr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nomad job validate %s: %w\n%s", path, err, out)
	}
	return string(out), nil
}

// WaitCheck waits until the allocation's Nomad service check named name
// reports status ("success", "failure"), and returns it. It fails when ctx
// ends, with the check's last status and output.
func (a *Agent) WaitCheck(ctx context.Context, allocID, name, status string) (api.AllocCheckStatus, error) {
	var last api.AllocCheckStatus
	var lastErr error
	for {
		checks, err := a.Client.Allocations().Checks(allocID, a.q(ctx))
		lastErr = err
		for _, c := range checks {
			if c.Check == name {
				last = c
			}
		}
		if err == nil && last.Status == status {
			return last, nil
		}
		if err := a.sleep(ctx, func() string {
			return fmt.Sprintf("check %q of allocation %s: status %q (output %q, error %v), want %q",
				name, allocID, last.Status, strings.TrimSpace(last.Output), lastErr, status)
		}); err != nil {
			return last, err
		}
	}
}
