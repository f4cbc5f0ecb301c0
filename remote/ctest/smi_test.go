package ctest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The nvidia-smi of remote shares (remote/nvml/smi): built beside the NVML
// library by `make remote-nvml`, run as a container runs it, against the
// server on the fake backend while another process of the share holds
// memory.

// TestNVIDIASMI checks each form against what the share is: one GPU, the
// fake's name and UUID, the quota as its memory and the holder's memory as
// used.
func TestNVIDIASMI(t *testing.T) {
	const quota, held = 512 << 20, 40 << 20
	e := startServer(t)
	tok := mint(t, "ctest-smi", quota)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, _ := program{name: "nvml", args: []string{"hold", strconv.Itoa(held)}, addr: e.unix, token: tok}.start(ctx, t, "READY")
	defer holder.finish(t)

	name, uuid := e.gpu0()
	smi := func(args ...string) (string, string) {
		return program{name: "nvidia-smi", args: args, addr: e.tcp, token: tok}.run(t)
	}
	for _, tc := range []struct {
		args []string
		want []string // whole lines
	}{
		{[]string{"-L"}, []string{fmt.Sprintf("GPU 0: %s (UUID: %s)", name, uuid)}},
		{[]string{"--query-gpu=index,name,uuid,memory.total,memory.used,memory.free,temperature.gpu", "--format=csv"}, []string{
			"index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], temperature.gpu",
			fmt.Sprintf("0, %s, %s, 512 MiB, 40 MiB, 472 MiB, [N/A]", name, uuid),
		}},
		{[]string{"--query-gpu=memory.total,memory.used,count", "--format=csv,noheader,nounits", "-i", uuid}, []string{"512, 40, 1"}},
		{[]string{"--query-gpu=gpu_name", "--format=csv,noheader", "--id=0"}, []string{name}},
		// nvidia-smi itself holds no context: no process.
		{[]string{"--query-compute-apps=pid,used_memory", "--format=csv"}, []string{"pid, used_gpu_memory [MiB]"}},
	} {
		out, stderr := smi(tc.args...)
		if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !equalLines(got, tc.want) {
			t.Errorf("nvidia-smi %s:\n%s\nwant:\n%s", strings.Join(tc.args, " "), out, strings.Join(tc.want, "\n"))
		}
		if stderr != "" {
			t.Errorf("nvidia-smi %s wrote to stderr: %s", strings.Join(tc.args, " "), stderr)
		}
	}

	// The table and the details: the GPU and the share's memory.
	table, _ := smi()
	for _, want := range []string{"| NVIDIA-SMI (gpumux remote share)", "40MiB / 512MiB", name[:min(len(name), 26)], "No running processes found"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(table, "\n"), "\n")[1:] {
		if line != "" && len(line) != 91 {
			t.Errorf("table line of %d characters, want 91 (nvidia-smi's): %q", len(line), line)
		}
	}
	details, _ := smi("-q")
	for _, want := range []string{"Attached GPUs                             : 1", "GPU UUID                              : " + uuid,
		"Total                             : 512 MiB", "Used                              : 40 MiB"} {
		if !strings.Contains(details, want) {
			t.Errorf("-q lacks %q:\n%s", want, details)
		}
	}
}

// TestNVIDIASMIErrors: bad arguments are named, with status 2, before
// the server is asked; an unknown GPU is status 6; no server is status 9
// with the interposer's reason.
func TestNVIDIASMIErrors(t *testing.T) {
	e := startServer(t)
	tok := mint(t, "ctest-smi-errors", 64<<20)
	for _, tc := range []struct {
		args   []string
		addr   string
		status int
		want   string
	}{
		{[]string{"--query-gpu=name,colour", "--format=csv"}, "", 2, `field "colour" is not a valid field to query`},
		{[]string{"--query-gpu=name"}, "", 2, "need --format=csv"},
		{[]string{"--query-gpu=name", "--format=xml"}, "", 2, `"xml" is not one of csv, noheader, nounits`},
		{[]string{"--frobnicate"}, "", 2, "--frobnicate is not an option this nvidia-smi answers"},
		{[]string{"-L", "-i", ","}, "", 2, `-i ",": want GPU indexes, UUIDs or PCI bus ids`},
		{[]string{"-L", "-i", "7"}, e.tcp, 6, "no GPU 7: this container's share has 1 GPU(s)"},
		{[]string{"-L"}, "", 9, "GPUMUX_REMOTE_ADDR is not set"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := program{name: "nvidia-smi", args: tc.args, addr: tc.addr, token: tok}.command(ctx, t)
		out, err := cmd.CombinedOutput()
		cancel()
		if got := cmd.ProcessState.ExitCode(); got != tc.status || !strings.Contains(string(out), tc.want) {
			t.Errorf("nvidia-smi %s: status %d (%v), output:\n%s\nwant status %d and %q", strings.Join(tc.args, " "), got, err, out, tc.status, tc.want)
		}
	}
}

func equalLines(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if strings.TrimRight(got[i], " ") != want[i] {
			return false
		}
	}
	return true
}
