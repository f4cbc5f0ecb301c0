package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/cli"
)

func TestMain(m *testing.M) {
	// No test may ask a Nomad agent that happens to run on this machine.
	os.Unsetenv("NOMAD_ADDR")
	os.Unsetenv("NOMAD_TOKEN")
	if os.Getenv(envRunCLI) != "" { // the test binary as the gpumux binary (gpumuxCommand)
		os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	restore := cli.SetDefaultNomadAddr("http://" + closedAddr())
	code := m.Run()
	restore()
	os.Exit(code)
}

// closedAddr is a local address where nothing listens.
func closedAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// fakeNomad is a Nomad agent's HTTP API: its node (nodeID, "" for an agent
// without a client) and the node's allocations.
func fakeNomad(t *testing.T, nodeID, token string, allocs []*api.Allocation) string {
	t.Helper()
	mux := http.NewServeMux()
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		if token != "" && r.Header.Get("X-Nomad-Token") != token {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return false
		}
		return true
	}
	mux.HandleFunc("/v1/agent/self", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		self := api.AgentSelf{Stats: map[string]map[string]string{"nomad": {"server": "false"}}}
		if nodeID != "" {
			self.Stats["client"] = map[string]string{"node_id": nodeID}
		}
		json.NewEncoder(w).Encode(self)
	})
	mux.HandleFunc("/v1/node/", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		if r.URL.Path != "/v1/node/"+nodeID+"/allocations" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(allocs)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// alloc is an allocation of job "holder" whose task "hold" holds devices.
func alloc(status string, taskState string, devices ...string) *api.Allocation {
	a := &api.Allocation{
		ID: "0123abcd-0000-4000-8000-000000000001", JobID: "holder", ClientStatus: status,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"hold": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H200-mig-7g.141gb", DeviceIDs: devices}}},
		}},
	}
	if taskState != "" {
		a.TaskStates = map[string]*api.TaskState{"hold": {State: taskState}}
	}
	return a
}

// TestMIGApplyNomadAllocations: a MIG instance that a live Nomad allocation
// holds (a reservation made through the plugin's Reserve for a task that
// runs nothing on the GPU yet, or never will, as an exec task) counts as
// busy, like a gpumux-runtime lease.
func TestMIGApplyNomadAllocations(t *testing.T) {
	const node = "node-1"
	tests := []struct {
		name     string
		allocs   func(inst, other string) []*api.Allocation
		client   bool   // the agent runs a client
		token    string // the agent wants this ACL token
		envToken string // NOMAD_TOKEN
		flags    []string
		noAgent  bool // --nomad names an address where nothing listens
		wantExit int
		wantErr  string // in stderr
		wantKept bool   // the 7g.141gb survives
	}{
		{
			name:   "running allocation holds the instance",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: true, wantExit: cli.ExitBusy, wantErr: "held by Nomad allocation 0123abcd (job holder, task hold)", wantKept: true,
		},
		{
			name: "running allocation holds an MPS share on the instance",
			allocs: func(inst, _ string) []*api.Allocation {
				return []*api.Allocation{alloc("running", "running", inst+"/mps/1")}
			},
			client: true, wantExit: cli.ExitBusy, wantErr: "held by Nomad allocation 0123abcd", wantKept: true,
		},
		{
			name:   "pending allocation, task not started",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("pending", "", inst)} },
			client: true, wantExit: cli.ExitBusy, wantErr: "held by Nomad allocation", wantKept: true,
		},
		{
			name:   "complete allocation",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("complete", "dead", inst)} },
			client: true, wantExit: cli.ExitOK,
		},
		{
			name:   "dead task of a running allocation",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "dead", inst)} },
			client: true, wantExit: cli.ExitOK,
		},
		{
			name:   "allocation holds another GPU's instance",
			allocs: func(_, other string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", other)} },
			client: true, wantExit: cli.ExitOK,
		},
		{
			name:   "--force lets a held instance go",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: true, flags: []string{"--force"}, wantExit: cli.ExitOK,
		},
		{
			name:   "agent without a client",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: false, wantExit: cli.ExitOK, wantErr: "runs no client, so this node has no Nomad allocations",
		},
		{
			name:   "ACL token refused",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: true, token: "s3cret", wantExit: cli.ExitError, wantErr: "NOMAD_TOKEN", wantKept: true,
		},
		{
			name:   "ACL token given",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: true, token: "s3cret", envToken: "s3cret", wantExit: cli.ExitBusy, wantErr: "held by Nomad allocation", wantKept: true,
		},
		{
			name: "named agent does not answer", noAgent: true, wantExit: cli.ExitError, wantErr: "pass --nomad off", wantKept: true,
		},
		{
			name:   "--nomad off",
			allocs: func(inst, _ string) []*api.Allocation { return []*api.Allocation{alloc("running", "running", inst)} },
			client: true, flags: []string{"--nomad", "off"}, wantExit: cli.ExitOK,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newMIGNode(t)
			setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0,1\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
			code, out, errOut := n.run("mig", "apply", "--nomad", "off", "-f", setup)
			mustExit(t, "setup", code, cli.ExitOK, out, errOut)
			inv := n.inventory()
			inst, other := inv.GPUs[0].MIGInstances[0].UUID, inv.GPUs[1].MIGInstances[0].UUID

			addr := "http://" + closedAddr()
			if !tc.noAgent {
				id := ""
				if tc.client {
					id = node
				}
				addr = fakeNomad(t, id, tc.token, tc.allocs(inst, other))
			}
			if tc.envToken != "" {
				t.Setenv("NOMAD_TOKEN", tc.envToken)
			}
			change := n.file("change.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
			flags := append([]string{"--nomad", addr}, tc.flags...)
			if tc.wantExit == cli.ExitBusy {
				code, out, errOut := n.run(append([]string{"mig", "plan", "-f", change}, flags...)...)
				mustExit(t, "plan", code, cli.ExitOK, out, errOut)
				if !strings.Contains(out, "apply will refuse: "+inst) {
					t.Errorf("plan does not mark %s in use:\n%s", inst, out)
				}
			}
			code, out, errOut = n.run(append([]string{"mig", "apply", "-f", change}, flags...)...)
			mustExit(t, "apply", code, tc.wantExit, out, errOut)
			if !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErr, errOut)
			}
			got := n.inventory().GPUs[0].MIGInstances
			if kept := len(got) == 1 && got[0].UUID == inst; kept != tc.wantKept {
				t.Errorf("the 7g.141gb kept: %v, want %v (GPU 0: %+v)", kept, tc.wantKept, got)
			}
		})
	}
}

// Without --nomad and NOMAD_ADDR, apply asks the agent at the default
// address, and where none listens goes on with a note.
func TestMIGApplyNoNomadAgent(t *testing.T) {
	n := newMIGNode(t)
	f := n.file("l.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", f)
	mustExit(t, "apply", code, cli.ExitOK, out, errOut)
	if !strings.Contains(errOut, "note: no Nomad agent listens at http://127.0.0.1:") {
		t.Errorf("stderr:\n%s", errOut)
	}
	// A named address is not given up on that easily.
	t.Setenv("NOMAD_ADDR", "http://"+closedAddr())
	code, out, errOut = n.run("mig", "apply", "-f", f)
	mustExit(t, "apply with NOMAD_ADDR", code, cli.ExitError, out, errOut)
}
