//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
	"github.com/gpumux/gpumux/e2e/netns"
	"github.com/gpumux/gpumux/e2e/nomadagent"
)

// clusterSubnet is the private network of TestCluster's hosts.
const clusterSubnet = "10.213.0.0/24"

// clusterRemoteTimeout is GPUMUX_REMOTE_TIMEOUT of the remote task that
// loses its server: the bound within which the interposer gives up a call.
const clusterRemoteTimeout = 5 * time.Second

// cluster is a Nomad server and three clients, each in a network namespace
// of its own: two GPU nodes (simulated DGX H200s, every GPU whole) and one
// node without GPUs whose plugin offers the GPU nodes' GPUs as remote
// shares.
type cluster struct {
	net    *netns.Network
	server *nomadagent.Agent
	gpu    []*nomadagent.Agent
	remote *nomadagent.Agent
	// hosts maps a client's node ID to its namespace.
	hosts map[string]*netns.Node
}

func (c *cluster) clients() []*nomadagent.Agent {
	return append(append([]*nomadagent.Agent{}, c.gpu...), c.remote)
}

// startCluster builds the network and starts the agents: the server, the
// two GPU nodes (raw_exec: gpumux-remoted runs from bin/) and the remote
// node (exec: a task's remote share mounts the interposer, which raw_exec
// would not; it is the only client running exec tasks, so no two clients'
// exec tasks meet in the cgroups all agents of the host share).
func startCluster(ctx context.Context, t *testing.T, keyFile string) *cluster {
	t.Helper()
	c := &cluster{net: netns.New(ctx, t, "c", clusterSubnet), hosts: map[string]*netns.Node{}}
	agentNS := func(n *netns.Node) nomadagent.Option {
		return nomadagent.InNetNS(nomadagent.NetNS{Path: n.Path, Interface: n.Interface, Addr: n.Addr.String()})
	}
	srv := c.net.AddNode(ctx, "server")
	c.server = nomadagent.Start(ctx, t, nomadagent.AsServer(), agentNS(srv), nomadagent.WithLogLevel("INFO"))
	rawExec := nomadagent.WithAgentConfig("plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}")
	for _, name := range []string{"gpu1", "gpu2"} {
		host := c.net.AddNode(ctx, name)
		stateDir, err := os.MkdirTemp("", "gmx")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(stateDir) })
		a := nomadagent.Start(ctx, t, nomadagent.AsClient(c.server.ServerAddr()), agentNS(host),
			nomadagent.WithLogLevel("INFO"),
			nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
			nomadagent.WithPluginConfig(fmt.Sprintf("simulate = \"dgxh200\"\nstate_dir = %q\nfingerprint_period = \"5s\"", stateDir)),
			rawExec,
			nomadagent.WithDrivers("raw_exec"),
			nomadagent.WaitForDevice("nvidia", "gpu"))
		c.gpu = append(c.gpu, a)
		c.hosts[a.NodeID] = host
	}
	host := c.net.AddNode(ctx, "remote")
	c.remote = nomadagent.Start(ctx, t, nomadagent.AsClient(c.server.ServerAddr()), agentNS(host),
		nomadagent.WithLogLevel("INFO"),
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithAgentConfig(remoteClientConfig(t, keyFile)),
		nomadagent.WithDrivers("exec"))
	c.hosts[c.remote.NodeID] = host
	// Runs first: client agents leave their tasks running when they stop.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.server.StopJobs(ctx, c.clients()...); err != nil {
			t.Errorf("stopping the cluster's jobs: %v", err)
		}
	})
	nodes, _, err := c.server.Client.Nodes().List(nil)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("the server knows %d nodes (%v), want 3", len(nodes), err)
	}
	return c
}

// clusterServerJob is the server job for the cluster: the example with the
// GPU reservation, the check and the secret it has, on the fake backend
// standing in for the GPU it reserves (its UUID, from
// NVIDIA_VISIBLE_DEVICES), as a service job of two servers spread over
// the GPU nodes instead of a system job: the test moves servers between
// nodes (a drain), which a system job, tied to its nodes, does not do.
// Live migration is on (the example's commented --drain-to pool line), so a
// drained server hands its sessions to the other. A
// killed server stays down (the example's restart policy would bring it
// back at the same address 15s later, and which server a rescheduled
// remote task finds would depend on timing).
func clusterServerJob(t *testing.T) string {
	t.Helper()
	const name = "examples/jobs/remote-server.nomad.hcl"
	job := remotedJob(t, `"--fake-uuids", "${NVIDIA_VISIBLE_DEVICES}",`)
	job = mustReplace(t, name, job, `# "--migratable", "--drain-to", "pool",`, `"--migratable", "--drain-to", "pool",`)
	job = mustReplace(t, name, job, `type = "system"`, `type = "service"`)
	return mustReplace(t, name, job, "  group \"remoted\" {\n", `  group "remoted" {
    count = 2

    spread {
      attribute = "${node.unique.id}"
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

`)
}

// remoteHoldJob runs remote-probe hold on a remote share with the
// interposer's timeout at clusterRemoteTimeout; a failed task fails its
// allocation, which Nomad reschedules (a new reservation, so a new share,
// maybe of another server) 10s later.
func remoteHoldJob(probeURL string) string {
	return fmt.Sprintf(`job "remote-hold" {
  type = "batch"

  group "hold" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts       = 3
      interval       = "1h"
      delay          = "10s"
      delay_function = "constant"
      unlimited      = false
    }

    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo GPUMUX_REMOTE_ADDR=$GPUMUX_REMOTE_ADDR; exec local/remote-probe hold"]
      }
      env {
        GPUMUX_REMOTE_TIMEOUT = "%g"
        # Logs every move the interposer follows.
        GPUMUX_REMOTE_DEBUG = "1"
      }
      artifact {
        source      = %q
        destination = "local/"
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "remote"
          }
        }
      }
    }
  }
}
`, clusterRemoteTimeout.Seconds(), probeURL)
}

// tooBigJob asks for 4 × 5 whole GPUs: more than the cluster's 16, and a
// GPU node holds one of its allocations at most.
const tooBigJob = `job "too-big-for-cluster" {
  type = "batch"

  group "g" {
    count = 4

    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 5
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "exclusive"
          }
        }
      }
    }
  }
}
`

// remoted is one gpumux-remoted of the cluster: its allocation, the node
// it runs on, its address and the GPU it reserved.
type remoted struct {
	alloc *api.Allocation
	addr  string
	gpu   string // the reserved GPU's UUID, which the fake backend serves
}

func (r remoted) String() string {
	return fmt.Sprintf("%s (alloc %s, GPU %s)", r.addr, r.alloc.ID[:8], r.gpu)
}

// waitServers waits until the server job has n running allocations, each
// registered as service gpumux-remote, and returns them by address.
func (c *cluster) waitServers(ctx context.Context, t *testing.T, jobID string, n int) map[string]remoted {
	t.Helper()
	var state string
	for {
		allocs, err := c.server.Allocs(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		regs, _, err := c.server.Client.Services().Get("gpumux-remote", (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		byAlloc := map[string]*api.ServiceRegistration{}
		for _, r := range regs {
			byAlloc[r.AllocID] = r
		}
		out := map[string]remoted{}
		for _, al := range allocs {
			reg := byAlloc[al.ID]
			if al.ClientStatus != api.AllocClientStatusRunning || reg == nil {
				continue
			}
			devs, err := c.server.AllocDevices(ctx, al.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(devs["remoted"]) != 1 {
				t.Fatalf("server allocation %s reserved GPUs %v, want one", al.ID, devs)
			}
			addr := net.JoinHostPort(reg.Address, strconv.Itoa(reg.Port))
			out[addr] = remoted{alloc: al, addr: addr, gpu: devs["remoted"][0]}
		}
		if len(out) == n && len(regs) == n {
			return out
		}
		state = fmt.Sprintf("%d running server allocations registered (%d registrations), want %d", len(out), len(regs), n)
		select {
		case <-ctx.Done():
			t.Fatalf("%v: %s", ctx.Err(), state)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitPool waits until the remote node offers the shares of the GPUs in
// healthy (each served at its address) as healthy, and those of sick as
// unhealthy with a reason naming their server's address, and returns the
// remote node's shares by GPU UUID.
func (c *cluster) waitPool(ctx context.Context, t *testing.T, healthy, sick []remoted) map[string][]*api.NodeDevice {
	t.Helper()
	var state string
	for {
		devs, err := c.remote.NodeDevices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byGPU := map[string][]*api.NodeDevice{}
		if g := remoteGroup(devs); g != nil {
			for _, d := range g.Instances {
				uuid, _, _ := strings.Cut(d.ID, "/remote/")
				byGPU[uuid] = append(byGPU[uuid], d)
			}
		}
		var problems []string
		check := func(r remoted, wantHealthy bool) {
			shares := byGPU[r.gpu]
			if len(shares) != 4 {
				problems = append(problems, fmt.Sprintf("%d shares of %s", len(shares), r))
			}
			for _, d := range shares {
				if d.Healthy != wantHealthy || (!wantHealthy && !strings.Contains(d.HealthDescription, "remote server "+r.addr)) {
					problems = append(problems, fmt.Sprintf("share %s healthy=%v (%s), want healthy=%v", d.ID, d.Healthy, d.HealthDescription, wantHealthy))
				}
			}
		}
		for _, r := range healthy {
			check(r, true)
		}
		for _, r := range sick {
			check(r, false)
		}
		if len(problems) == 0 {
			return byGPU
		}
		state = strings.Join(problems, "; ")
		select {
		case <-ctx.Done():
			t.Fatalf("%v: the remote node's shares: %s", ctx.Err(), state)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var remoteAddrLine = regexp.MustCompile(`(?m)^GPUMUX_REMOTE_ADDR=(\S+)$`)

// TestCluster runs the remote pool on a Nomad cluster of one server and
// three clients in network namespaces of their own: gpumux-remoted runs as
// a Nomad job on the two GPU nodes, reserving a simulated GPU each, and the
// node without GPUs offers their GPUs as remote shares. A task there uses a
// server on another node; a task whose server is killed fails within the
// interposer's timeout and its rescheduled allocation reaches the other
// server; a drained GPU node's server moves to the other GPU node and the
// pool follows; a job larger than the cluster stays pending with Nomad's
// reason.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	requireRemoteBuild(t)
	secret, keyFile := poolSecret(t)
	c := startCluster(ctx, t, keyFile)
	// The tasks fetch the probe from the root namespace, over the network.
	probeURL := serveRemoteProbe(t, c.net.HostAddr.String())

	if err := c.server.PutVariable(ctx, &api.Variable{Path: "nomad/jobs/gpumux-remote", Items: api.VariableItems{"secret": secret}}); err != nil {
		t.Fatal(err)
	}
	serverJob, err := c.server.RunJob(ctx, clusterServerJob(t))
	if err != nil {
		t.Fatal(err)
	}
	if allocs, err := c.server.WaitAllocs(ctx, serverJob, api.AllocClientStatusRunning); err != nil {
		for _, al := range allocs {
			errOut, _ := c.server.TaskLogs(ctx, al.ID, "remoted", "stderr")
			t.Logf("allocation %s: gpumux-remoted's stderr:\n%s", al.ID, errOut)
		}
		t.Fatal(err)
	}
	servers := c.waitServers(ctx, t, serverJob, 2)
	var all []remoted
	onNode := map[string]remoted{}
	for _, r := range servers {
		all = append(all, r)
		host := c.hosts[r.alloc.NodeID]
		if host == nil || !strings.HasPrefix(r.addr, host.Addr.String()+":") {
			t.Fatalf("server %s runs on node %s, not at that node's address", r, r.alloc.NodeID)
		}
		onNode[r.alloc.NodeID] = r
		// The task runs in its client's namespace.
		procs, err := hostcheck.Procs[hostcheck.Proc](hostcheck.Owner{NetNS: host.Path})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range procs {
			found = found || strings.Contains(p.Cmdline, "gpumux-remoted --listen "+r.addr)
		}
		if !found {
			t.Errorf("no gpumux-remoted serving %s in namespace %s", r.addr, host.NS)
		}
	}
	if len(onNode) != 2 {
		t.Fatalf("the two servers run on %d GPU node(s), want one on each: %v", len(onNode), all)
	}
	t.Logf("gpumux-remoted runs at %v", all)
	c.waitPool(ctx, t, all, nil)

	t.Run("remote task reaches a server on another node", func(t *testing.T) {
		jobID, err := c.server.RunJob(ctx, remoteJob(t, probeURL))
		if err != nil {
			t.Fatal(err)
		}
		allocs, err := c.server.WaitAllocs(ctx, jobID, api.AllocClientStatusComplete)
		if err != nil {
			t.Fatal(err)
		}
		if allocs[0].NodeID != c.remote.NodeID {
			t.Errorf("the remote task ran on node %s, want the remote node %s", allocs[0].NodeID, c.remote.NodeID)
		}
		out, err := c.server.TaskLogs(ctx, allocs[0].ID, "probe", "stdout")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the task printed:\n%s", out)
		m := remoteAddrLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatal("the task printed no GPUMUX_REMOTE_ADDR")
		}
		r, ok := servers[m[1]]
		if !ok {
			t.Fatalf("the task's server %s is none of the cluster's %v", m[1], all)
		}
		if strings.HasPrefix(m[1], c.hosts[c.remote.NodeID].Addr.String()+":") {
			t.Errorf("the task's server %s is on its own node", m[1])
		}
		for _, want := range []string{
			"GPUMUX_SHARES=" + r.gpu + "/remote/",
			"LIB /run/gpumux/remote/libcuda.so.1\n",
			"DEVICES 1\n",
			"MEMORY 4294967296\n",
			"ALLOC 3221225472 CUDA_SUCCESS\n",
			"ALLOC 2147483648 CUDA_ERROR_OUT_OF_MEMORY\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the task's output lacks %q", want)
			}
		}
		serverLog, err := c.server.TaskLogs(ctx, r.alloc.ID, "remoted", "stderr")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(serverLog, `msg="client connected"`) || !strings.Contains(serverLog, c.hosts[c.remote.NodeID].Addr.String()) {
			t.Errorf("the server did not log the remote node's connection:\n%s", serverLog)
		}
		if err := c.server.StopJob(ctx, jobID, true, c.clients()...); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("draining a GPU node moves its server, its sessions and the pool follow", func(t *testing.T) {
		// A remote task holds memory on one server, whose node is drained:
		// the server moves to the other GPU node, which then runs both, and
		// on its way out hands the task's session to a server of the pool
		// (--drain-to pool, found through the Nomad service); the task
		// carries on there with its memory as it was.
		holdJob, err := c.server.RunJob(ctx, remoteHoldJob(probeURL))
		if err != nil {
			t.Fatal(err)
		}
		holds, err := c.server.WaitAllocs(ctx, holdJob, api.AllocClientStatusRunning)
		if err != nil {
			t.Fatal(err)
		}
		hold := holds[0]
		m := remoteAddrLine.FindStringSubmatch(c.waitLog(ctx, t, hold.ID, "HOLD\n"))
		if m == nil || servers[m[1]].alloc == nil {
			t.Fatalf("the holding task's server is none of the cluster's %v", all)
		}
		drained := servers[m[1]]
		node := drained.alloc.NodeID
		t.Logf("draining node %s, whose server %s holds the task's session", node, drained)
		spec := &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: 2 * time.Minute}}
		if _, err := c.server.Client.Nodes().UpdateDrainOpts(node, spec, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
		for {
			n, _, err := c.server.Client.Nodes().Info(node, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			servers = c.waitServers(ctx, t, serverJob, 2)
			left := 0
			for _, r := range servers {
				if r.alloc.NodeID == node {
					left++
				}
			}
			if n.DrainStrategy == nil && left == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("node %s: drain %+v, servers %v: %v", node, n.DrainStrategy, servers, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
		all = all[:0]
		for _, r := range servers {
			all = append(all, r)
			if r.gpu == drained.gpu || !strings.HasPrefix(r.addr, c.hosts[r.alloc.NodeID].Addr.String()+":") {
				t.Errorf("server %s is not at its node's address, with a GPU of its own", r)
			}
		}
		t.Logf("after draining node %s, gpumux-remoted runs at %v", node, all)
		byGPU := c.waitPool(ctx, t, all, []remoted{drained})
		for uuid, shares := range byGPU {
			for _, d := range shares {
				if d.Healthy && uuid != all[0].gpu && uuid != all[1].gpu {
					t.Errorf("share %s of GPU %s is healthy; only the GPUs of %v are served", d.ID, uuid, all)
				}
			}
		}

		// The session went to a server that stayed, and the task saw
		// nothing but the move (its pattern checked every 100 ms).
		serverLog, _ := c.server.TaskLogs(ctx, drained.alloc.ID, "remoted", "stderr")
		if !strings.Contains(serverLog, "msg=drained") {
			t.Errorf("the drained server did not hand its sessions over:\n%s", serverLog)
		}
		moved := regexp.MustCompile(`the session moved from ` + regexp.QuoteMeta(drained.addr) + ` to (\S+) \(move 1\)`)
		var errOut string
		for deadline := time.Now().Add(30 * time.Second); ; {
			errOut, _ = c.server.TaskLogs(ctx, hold.ID, "probe", "stderr")
			if moved.MatchString(errOut) || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		to := moved.FindStringSubmatch(errOut)
		if to == nil || servers[to[1]].alloc == nil || to[1] == drained.addr {
			t.Errorf("the task's session did not move to another server of the cluster %v; its stderr:\n%s\nthe drained server's log:\n%s", all, errOut, serverLog)
		} else {
			t.Logf("the task's session moved from %s to %s", drained, servers[to[1]])
		}
		time.Sleep(time.Second) // a few more checks of the pattern there
		out, _ := c.server.TaskLogs(ctx, hold.ID, "probe", "stdout")
		al, _, err := c.server.Client.Allocations().Info(hold.ID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if al.ClientStatus != api.AllocClientStatusRunning || strings.Contains(out, "LOST") || strings.Contains(out, "CORRUPT") {
			t.Errorf("the holding task is %s after the move; it printed:\n%s", al.ClientStatus, out)
		}
		if err := c.server.StopJob(ctx, holdJob, true, c.clients()...); err != nil {
			t.Fatal(err)
		}
		if _, err := c.server.Client.Nodes().ToggleEligibility(node, true, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}

	// After the drain: Nomad's drainer migrates no allocation of a job that
	// has an unhealthy one (such as a killed server's), so this comes second.
	t.Run("killed server fails its task, which Nomad reschedules onto the other", func(t *testing.T) {
		var survivor remoted
		jobID, err := c.server.RunJob(ctx, remoteHoldJob(probeURL))
		if err != nil {
			t.Fatal(err)
		}
		allocs, err := c.server.WaitAllocs(ctx, jobID, api.AllocClientStatusRunning)
		if err != nil {
			t.Fatal(err)
		}
		first := allocs[0]
		out := c.waitLog(ctx, t, first.ID, "HOLD\n")
		m := remoteAddrLine.FindStringSubmatch(out)
		if m == nil || servers[m[1]].alloc == nil {
			t.Fatalf("the task's server is none of the cluster's %v:\n%s", all, out)
		}
		victim := servers[m[1]]
		for _, r := range all {
			if r.addr != victim.addr {
				survivor = r
			}
		}
		t.Logf("killing gpumux-remoted at %s, which the task uses; %s remains", victim, survivor)
		if err := c.server.Client.Allocations().Signal(victim.alloc, (&api.QueryOptions{}).WithContext(ctx), "remoted", "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		failed := c.waitAllocStatus(ctx, t, first.ID, api.AllocClientStatusFailed)
		out, err = c.server.TaskLogs(ctx, first.ID, "probe", "stdout")
		if err != nil {
			t.Fatal(err)
		}
		errOut, _ := c.server.TaskLogs(ctx, first.ID, "probe", "stderr")
		t.Logf("the task printed:\n%s\nstderr:\n%s\nevents:\n%s", out, errOut, nomadagent.TaskEvents(failed))
		lost := regexp.MustCompile(`(?m)^LOST (\d+) (\S+)$`).FindStringSubmatch(out)
		if lost == nil {
			t.Fatal("the task did not report its lost server")
		}
		ms, _ := strconv.Atoi(lost[1])
		if lost[2] != "CUDA_ERROR_UNKNOWN" || time.Duration(ms)*time.Millisecond > clusterRemoteTimeout {
			t.Errorf("the call in flight returned %s after %d ms, want CUDA_ERROR_UNKNOWN within GPUMUX_REMOTE_TIMEOUT (%v)", lost[2], ms, clusterRemoteTimeout)
		}
		if !strings.Contains(errOut, "lost the connection to gpumux-remoted at "+victim.addr) {
			t.Errorf("the interposer did not log the lost connection to %s", victim.addr)
		}
		c.waitAllocStatus(ctx, t, victim.alloc.ID, api.AllocClientStatusFailed)

		// Nomad reschedules the task; its new reservation is a share of the
		// server that is left (one on the dead server, taken before the
		// remote node reported its shares unhealthy, fails in turn: the
		// task, or the plugin's Reserve that sees the share unhealthy).
		seen := map[string]bool{first.ID: true}
		for {
			allocs, err := c.server.Allocs(ctx, jobID)
			if err != nil {
				t.Fatal(err)
			}
			var next *api.Allocation
			for _, al := range allocs {
				if !seen[al.ID] {
					next = al
					break
				}
			}
			if next == nil {
				select {
				case <-ctx.Done():
					t.Fatalf("Nomad did not reschedule the task: %v", ctx.Err())
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			seen[next.ID] = true
			out, ended := c.logOrEnd(ctx, t, next.ID, "GPUMUX_REMOTE_ADDR=")
			if ended != nil {
				// Placed on a share of the dead server before its node
				// reported it: the plugin's Reserve refuses it, and Nomad
				// reschedules again. Anything else fails the test.
				if ev := nomadagent.TaskEvents(ended); !strings.Contains(ev, "unhealthy shares") || !strings.Contains(ev, victim.addr) {
					t.Fatalf("allocation %s ended (%s) without printing GPUMUX_REMOTE_ADDR=:\n%s\n%s", next.ID, ended.ClientStatus, out, ev)
				}
				t.Logf("allocation %s, rescheduled onto a share of %s before its node reported it unhealthy, was refused at its reservation: waiting for the next", next.ID[:8], victim.addr)
				continue
			}
			if m := remoteAddrLine.FindStringSubmatch(out); m != nil && m[1] == survivor.addr {
				c.waitLog(ctx, t, next.ID, "HOLD\n")
				t.Logf("allocation %s, rescheduled, holds memory on %s", next.ID[:8], survivor)
				break
			}
			t.Logf("allocation %s, rescheduled, got a share of %s: waiting for the next", next.ID[:8], out)
		}
		c.waitPool(ctx, t, []remoted{survivor}, []remoted{victim})
		if err := c.server.StopJob(ctx, jobID, true, c.clients()...); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("job larger than the cluster stays pending with Nomad's reason", func(t *testing.T) {
		jobID, err := c.server.RunJob(ctx, tooBigJob)
		if err != nil {
			t.Fatal(err)
		}
		fails, err := c.server.PlacementFailures(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Nomad's reason: %s", nomadagent.FormatPlacementFailures(fails))
		m := fails["g"]
		if m == nil || m.DimensionExhausted["devices: no devices match request"] == 0 || m.NodesExhausted == 0 {
			t.Errorf("want group g's placement to fail with its devices exhausted, got %s", nomadagent.FormatPlacementFailures(fails))
		}
		evals, _, err := c.server.Client.Jobs().Evaluations(jobID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		var statuses []string
		blocked := false
		for _, ev := range evals {
			statuses = append(statuses, ev.Status)
			blocked = blocked || ev.Status == api.EvalStatusBlocked
		}
		if !blocked {
			t.Errorf("no blocked evaluation waits for capacity; evaluations: %v", statuses)
		}
		summary, _, err := c.server.Client.Jobs().Summary(jobID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		allocs, err := c.server.Allocs(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, al := range allocs {
			nodes[al.NodeID] = true
		}
		sort.Slice(allocs, func(i, j int) bool { return allocs[i].NodeID < allocs[j].NodeID })
		if q := summary.Summary["g"].Queued; q != 2 || len(allocs) != 2 || len(nodes) != 2 {
			t.Errorf("%d allocations on %d nodes and %d queued, want one on each GPU node and 2 queued", len(allocs), len(nodes), q)
		}
		if err := c.server.StopJob(ctx, jobID, true, c.clients()...); err != nil {
			t.Fatal(err)
		}
	})
}

// waitLog waits until the probe task's stdout in the allocation holds
// want, and returns it; it fails the test when the allocation ends
// without printing it.
func (c *cluster) waitLog(ctx context.Context, t *testing.T, allocID, want string) string {
	t.Helper()
	out, ended := c.logOrEnd(ctx, t, allocID, want)
	if ended != nil {
		t.Fatalf("allocation %s ended (%s) without printing %q:\n%s\n%s", allocID, ended.ClientStatus, want, out, nomadagent.TaskEvents(ended))
	}
	return out
}

// logOrEnd waits until the allocation's task has printed want, and
// returns its output, or until it ended without, and returns it too.
func (c *cluster) logOrEnd(ctx context.Context, t *testing.T, allocID, want string) (string, *api.Allocation) {
	t.Helper()
	for {
		out, err := c.server.TaskLogs(ctx, allocID, "probe", "stdout")
		if err == nil && strings.Contains(out, want) {
			return out, nil
		}
		al, _, infoErr := c.server.Client.Allocations().Info(allocID, (&api.QueryOptions{}).WithContext(ctx))
		if infoErr == nil && al.ClientStatus != api.AllocClientStatusPending && al.ClientStatus != api.AllocClientStatusRunning {
			// Ended: its log is whole.
			out, err := c.server.TaskLogs(ctx, allocID, "probe", "stdout")
			if err == nil && strings.Contains(out, want) {
				return out, nil
			}
			return out, al
		}
		select {
		case <-ctx.Done():
			t.Fatalf("allocation %s never printed %q: %v (last: %q, %v)", allocID, want, ctx.Err(), out, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitAllocStatus waits until the allocation's client status is want.
func (c *cluster) waitAllocStatus(ctx context.Context, t *testing.T, allocID, want string) *api.Allocation {
	t.Helper()
	for {
		al, _, err := c.server.Client.Allocations().Info(allocID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if al.ClientStatus == want {
			return al
		}
		select {
		case <-ctx.Done():
			t.Fatalf("allocation %s is %s, want %s: %v\n%s", allocID, al.ClientStatus, want, ctx.Err(), nomadagent.TaskEvents(al))
		case <-time.After(300 * time.Millisecond):
		}
	}
}
