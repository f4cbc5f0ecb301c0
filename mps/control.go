package mps

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment variables the control daemon and its clients read.
const (
	envPipeDir        = "CUDA_MPS_PIPE_DIRECTORY"
	envLogDir         = "CUDA_MPS_LOG_DIRECTORY"
	envVisibleDevices = "CUDA_VISIBLE_DEVICES"
)

// Files a control daemon creates in its pipe directory, as seen with driver
// 580.159.04: two sockets (control, mode 0666, and control_privileged, 0755),
// a lock file, a FIFO the servers log through, and the daemon's pid file.
// After a kill -9 all five stay; after quit, control, control_lock and
// control_privileged stay.
const pidFileName = "nvidia-cuda-mps-control.pid"

var daemonPipeFiles = []string{"control", "control_privileged", "control_lock", "log", pidFileName}

// maxPipeDirLen is the longest pipe directory a daemon can listen in: a unix
// socket path must fit in sun_path (108 bytes with its NUL), and the longest
// socket the daemon creates there is control_privileged. With a longer
// directory the real daemon's -d exits 1 without a word on stderr.
const maxPipeDirLen = 107 - len("/control_privileged")

// commander runs the control binary; execCommander is the real one.
type commander interface {
	// start runs "<binary> -d", which forks a daemon and returns.
	start(ctx context.Context, env []string) error
	// send runs the binary without arguments, writes one command on its
	// stdin and returns what it printed on stdout.
	send(ctx context.Context, env []string, command string) (string, error)
}

type execCommander struct{ path string }

// waitDelay bounds how long Wait waits for output after the process exits:
// a daemon that inherits stdout could otherwise hold the pipe open forever.
const waitDelay = time.Second

func (c execCommander) start(ctx context.Context, env []string) error {
	// A file, not a pipe: the forked daemon may keep the descriptor, and
	// Wait would then wait for it to close.
	out, err := os.CreateTemp("", "gpumux-mps-start-*.log")
	if err != nil {
		return fmt.Errorf("start %s -d: %w", c.path, err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, c.path, "-d")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session: signals meant for the plugin's process group (a
	// Ctrl-C in a terminal) never reach the daemon, whatever the binary does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = waitDelay
	runErr := cmd.Run()
	if runErr == nil {
		return nil
	}
	text, _ := os.ReadFile(out.Name())
	return fmt.Errorf("%s -d: %w%s", c.path, runErr, detail(string(text)))
}

func (c execCommander) send(ctx context.Context, env []string, command string) (string, error) {
	cmd := exec.CommandContext(ctx, c.path)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(command + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w%s", c.path, err, detail(stderr.String()+stdout.String()))
	}
	return stdout.String(), nil
}

// detail formats a command's output for an error message.
func detail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	const max = 512
	if len(s) > max {
		s = s[:max] + "…"
	}
	return ": " + strings.Join(strings.Fields(s), " ")
}

// daemonEnv is the environment for the control binary of one device: the
// plugin's own, less anything that would steer MPS elsewhere, plus the
// device's directories and CUDA_VISIBLE_DEVICES naming the device alone.
func daemonEnv(base []string, uuid, pipeDir, logDir string) []string {
	env := make([]string, 0, len(base)+3)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == envVisibleDevices || strings.HasPrefix(k, "CUDA_MPS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, envVisibleDevices+"="+uuid, envPipeDir+"="+pipeDir, envLogDir+"="+logDir)
}

// parsePIDs parses a reply of one pid per line (get_server_list,
// get_client_list). An empty reply is an empty list.
func parsePIDs(reply string) ([]int, error) {
	var pids []int
	for _, line := range strings.Split(reply, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("unexpected reply %q", strings.TrimSpace(reply))
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// parsePercent parses the reply of get_ or set_default_active_thread_percentage
// ("25.0"). set_ answers with the value in force afterwards: an invalid value
// is refused with the old one on stdout, exit status 0, and the reason only
// in control.log.
func parsePercent(reply string) (float64, error) {
	s := strings.TrimSpace(reply)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected reply %q", s)
	}
	return v, nil
}
