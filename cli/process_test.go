package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// envRunCLI makes the test binary run the gpumux command line (TestMain).
const envRunCLI = "GPUMUX_TEST_RUN_CLI"

// gpumuxCommand is the gpumux command line run as a process of its own
// (the test binary, through TestMain), for what a process must show: its
// exit status when it panics, what a SIGKILL at any instant leaves.
func gpumuxCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunCLI+"=1")
	return cmd
}

// runProcess runs gpumux as a process and returns its exit code and output.
func runProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := gpumuxCommand(t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
