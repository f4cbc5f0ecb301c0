package nomadagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// pollInterval is how often the helpers poll the agent.
const pollInterval = 200 * time.Millisecond

func (a *Agent) q(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

func (a *Agent) w(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// sleep waits one poll interval; it fails when ctx ends or the agent exits.
func (a *Agent) sleep(ctx context.Context, what func() string) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w: %s", ctx.Err(), what())
	case <-a.proc.Exited():
		return fmt.Errorf("nomad agent exited (%v) while waiting: %s", a.proc.WaitErr(), what())
	case <-time.After(pollInterval):
		return nil
	}
}

// ParseJob parses an HCL jobspec through the agent's /v1/jobs/parse
// endpoint (canonicalized).
func (a *Agent) ParseJob(ctx context.Context, hcl string) (*api.Job, error) {
	job, err := a.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       hcl,
		Canonicalize: true,
	})
	if err != nil {
		return nil, fmt.Errorf("parsing job: %w", err)
	}
	_ = ctx // ParseHCLOpts takes no options; it is a short local call.
	return job, nil
}

// RunJob parses the HCL jobspec through the agent and registers it. It
// returns the job ID; it does not wait for allocations (see WaitAllocs,
// PlacementFailures).
func (a *Agent) RunJob(ctx context.Context, hcl string) (string, error) {
	job, err := a.ParseJob(ctx, hcl)
	if err != nil {
		return "", err
	}
	if _, _, err := a.Client.Jobs().Register(job, a.w(ctx)); err != nil {
		return "", fmt.Errorf("registering job %s: %w", *job.ID, err)
	}
	return *job.ID, nil
}

// Allocs returns the job's allocations in full (including task states and
// allocated resources), oldest first.
func (a *Agent) Allocs(ctx context.Context, jobID string) ([]*api.Allocation, error) {
	stubs, _, err := a.Client.Jobs().Allocations(jobID, true, a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing allocations of %s: %w", jobID, err)
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].CreateIndex < stubs[j].CreateIndex })
	out := make([]*api.Allocation, 0, len(stubs))
	for _, s := range stubs {
		alloc, _, err := a.Client.Allocations().Info(s.ID, a.q(ctx))
		if err != nil {
			return nil, fmt.Errorf("allocation %s: %w", s.ID, err)
		}
		out = append(out, alloc)
	}
	return out, nil
}

func terminal(clientStatus string) bool {
	switch clientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// WaitAllocs waits until the job has as many allocations as its task
// groups' counts and all of them have client status want ("running",
// "complete", "failed", ...). It fails early, with the task events, when
// an allocation reaches a terminal status other than want, and with the
// placement failure when the scheduler could not place the job.
func (a *Agent) WaitAllocs(ctx context.Context, jobID, want string) ([]*api.Allocation, error) {
	job, _, err := a.Client.Jobs().Info(jobID, a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobID, err)
	}
	expected := 0
	for _, tg := range job.TaskGroups {
		if tg.Count != nil {
			expected += *tg.Count
		}
	}
	var state string
	for {
		allocs, err := a.Allocs(ctx, jobID)
		if err != nil {
			return nil, err
		}
		var statuses []string
		matching := 0
		for _, al := range allocs {
			statuses = append(statuses, fmt.Sprintf("%s=%s", shortID(al.ID), al.ClientStatus))
			if al.ClientStatus == want {
				matching++
				continue
			}
			if terminal(al.ClientStatus) {
				return allocs, fmt.Errorf("allocation %s of job %s is %s (%s), want %s; task events:\n%s",
					al.ID, jobID, al.ClientStatus, al.ClientDescription, want, TaskEvents(al))
			}
		}
		if len(allocs) >= expected && matching == len(allocs) && len(allocs) > 0 {
			return allocs, nil
		}
		if len(allocs) < expected {
			if fails, err := a.placementFailuresNow(ctx, jobID); err == nil && len(fails) > 0 {
				return allocs, fmt.Errorf("job %s could not be placed: %s", jobID, FormatPlacementFailures(fails))
			}
		}
		state = fmt.Sprintf("job %s: %d/%d allocations, want all %s: %s",
			jobID, len(allocs), expected, want, strings.Join(statuses, " "))
		if err := a.sleep(ctx, func() string { return state }); err != nil {
			return allocs, err
		}
	}
}

// TaskEvents formats the task states and events of an allocation, one line
// per event, for error messages.
func TaskEvents(al *api.Allocation) string {
	var b strings.Builder
	tasks := make([]string, 0, len(al.TaskStates))
	for name := range al.TaskStates {
		tasks = append(tasks, name)
	}
	sort.Strings(tasks)
	for _, name := range tasks {
		ts := al.TaskStates[name]
		fmt.Fprintf(&b, "  task %q: state=%s failed=%v restarts=%d\n", name, ts.State, ts.Failed, ts.Restarts)
		for _, ev := range ts.Events {
			msg := ev.DisplayMessage
			if msg == "" {
				msg = ev.Message
			}
			fmt.Fprintf(&b, "    %s %-20s %s\n", time.Unix(0, ev.Time).Format("15:04:05.000"), ev.Type, msg)
		}
	}
	return b.String()
}

// AllocDeviceResources returns what Nomad allocated to each task of the
// allocation: task name -> device groups with their instance IDs.
func (a *Agent) AllocDeviceResources(ctx context.Context, allocID string) (map[string][]*api.AllocatedDeviceResource, error) {
	alloc, _, err := a.Client.Allocations().Info(allocID, a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("allocation %s: %w", allocID, err)
	}
	out := map[string][]*api.AllocatedDeviceResource{}
	if alloc.AllocatedResources == nil {
		return out, nil
	}
	for task, tr := range alloc.AllocatedResources.Tasks {
		if tr != nil && len(tr.Devices) > 0 {
			out[task] = tr.Devices
		}
	}
	return out, nil
}

// AllocDevices returns the device instance IDs Nomad allocated to each task
// of the allocation (task name -> IDs, in allocation order). Tasks without
// devices are absent.
func (a *Agent) AllocDevices(ctx context.Context, allocID string) (map[string][]string, error) {
	res, err := a.AllocDeviceResources(ctx, allocID)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for task, devs := range res {
		for _, d := range devs {
			out[task] = append(out[task], d.DeviceIDs...)
		}
	}
	return out, nil
}

// TaskLogs returns the whole log of a task so far; logType is "stdout" or
// "stderr".
func (a *Agent) TaskLogs(ctx context.Context, allocID, task, logType string) (string, error) {
	v := url.Values{}
	v.Set("task", task)
	v.Set("type", logType)
	v.Set("origin", "start")
	v.Set("offset", "0")
	v.Set("plain", "true")
	v.Set("follow", "false")
	rc, err := a.Client.Raw().Response("/v1/client/fs/logs/"+url.PathEscape(allocID)+"?"+v.Encode(), a.q(ctx))
	if err != nil {
		return "", fmt.Errorf("%s logs of %s/%s: %w", logType, shortID(allocID), task, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return string(b), fmt.Errorf("reading %s logs of %s/%s: %w", logType, shortID(allocID), task, err)
	}
	return string(b), nil
}

// PlacementFailures waits until the job's evaluations are done and returns
// the failed task group allocation metrics of the latest evaluation that
// had any (task group -> metric; see FormatPlacementFailures). It returns
// an empty map when every evaluation placed everything.
func (a *Agent) PlacementFailures(ctx context.Context, jobID string) (map[string]*api.AllocationMetric, error) {
	var state string
	for {
		evals, _, err := a.Client.Jobs().Evaluations(jobID, a.q(ctx))
		if err != nil {
			return nil, fmt.Errorf("evaluations of %s: %w", jobID, err)
		}
		pending := 0
		for _, ev := range evals {
			if ev.Status == api.EvalStatusPending {
				pending++
			}
		}
		if len(evals) > 0 && pending == 0 {
			return latestFailures(evals), nil
		}
		state = fmt.Sprintf("job %s: %d evaluations, %d pending", jobID, len(evals), pending)
		if err := a.sleep(ctx, func() string { return state }); err != nil {
			return nil, err
		}
	}
}

func (a *Agent) placementFailuresNow(ctx context.Context, jobID string) (map[string]*api.AllocationMetric, error) {
	evals, _, err := a.Client.Jobs().Evaluations(jobID, a.q(ctx))
	if err != nil {
		return nil, err
	}
	return latestFailures(evals), nil
}

func latestFailures(evals []*api.Evaluation) map[string]*api.AllocationMetric {
	var best *api.Evaluation
	for _, ev := range evals {
		if len(ev.FailedTGAllocs) == 0 {
			continue
		}
		if best == nil || ev.CreateIndex > best.CreateIndex {
			best = ev
		}
	}
	if best == nil {
		return map[string]*api.AllocationMetric{}
	}
	return best.FailedTGAllocs
}

// FormatPlacementFailures renders failed task group metrics the way
// `nomad job status` does, e.g.
//
//	group "g": 1 node(s) evaluated, 0 filtered, 1 exhausted; dimension exhausted: devices: 1
func FormatPlacementFailures(fails map[string]*api.AllocationMetric) string {
	groups := make([]string, 0, len(fails))
	for g := range fails {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var parts []string
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("group %q: %s", g, FormatAllocMetric(fails[g])))
	}
	return strings.Join(parts, "; ")
}

// FormatAllocMetric renders one allocation metric: node counts plus the
// ConstraintFiltered, ClassFiltered, ClassExhausted, DimensionExhausted and
// QuotaExhausted reasons.
func FormatAllocMetric(m *api.AllocationMetric) string {
	if m == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%d node(s) evaluated, %d filtered, %d exhausted", m.NodesEvaluated, m.NodesFiltered, m.NodesExhausted)
	add := func(name string, mp map[string]int) {
		if len(mp) == 0 {
			return
		}
		keys := make([]string, 0, len(mp))
		for k := range mp {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, fmt.Sprintf("%s: %d", k, mp[k]))
		}
		s += fmt.Sprintf("; %s: %s", name, strings.Join(kv, ", "))
	}
	add("constraint filtered", m.ConstraintFiltered)
	add("class filtered", m.ClassFiltered)
	add("class exhausted", m.ClassExhausted)
	add("dimension exhausted", m.DimensionExhausted)
	if len(m.QuotaExhausted) > 0 {
		s += "; quota exhausted: " + strings.Join(m.QuotaExhausted, ", ")
	}
	return s
}

// StopJob deregisters the job (purging it if purge) and waits until all
// its allocations are terminal on the client, i.e. its tasks have been
// killed. With purge the client garbage-collects the allocations at once;
// StopJob then also waits until their alloc dirs (and the mounts in them)
// are gone, because an agent stopped in the middle of that collection
// leaves the mounts behind. clients are the agents whose nodes may have run
// the job's allocations, for their alloc dirs (default: a itself; an
// allocation of another node is not waited for).
func (a *Agent) StopJob(ctx context.Context, jobID string, purge bool, clients ...*Agent) error {
	if len(clients) == 0 {
		clients = []*Agent{a}
	}
	stubs, _, err := a.Client.Jobs().Allocations(jobID, true, a.q(ctx))
	if err != nil {
		return fmt.Errorf("listing allocations of %s: %w", jobID, err)
	}
	if _, _, err := a.Client.Jobs().Deregister(jobID, purge, a.w(ctx)); err != nil {
		return fmt.Errorf("deregistering %s: %w", jobID, err)
	}
	var state string
	for _, s := range stubs {
		for {
			alloc, _, err := a.Client.Allocations().Info(s.ID, a.q(ctx))
			if err != nil {
				var ue api.UnexpectedResponseError
				if errors.As(err, &ue) && ue.StatusCode() == 404 {
					break // garbage collected
				}
				return fmt.Errorf("allocation %s: %w", s.ID, err)
			}
			if terminal(alloc.ClientStatus) {
				break
			}
			state = fmt.Sprintf("allocation %s of stopped job %s is still %s", s.ID, jobID, alloc.ClientStatus)
			if err := a.sleep(ctx, func() string { return state }); err != nil {
				return err
			}
		}
		if !purge {
			continue
		}
		for _, c := range clients {
			if c.NodeID != s.NodeID {
				continue
			}
			if err := a.waitAllocDirGone(ctx, filepath.Join(c.DataDir, "alloc", s.ID), jobID); err != nil {
				return err
			}
		}
	}
	return nil
}

// StopJobs stops and purges every job of the default namespace (StopJob),
// e.g. before the clients of a cluster stop: a client agent, unlike a dev
// agent, leaves its tasks running when it stops.
func (a *Agent) StopJobs(ctx context.Context, clients ...*Agent) error {
	jobs, _, err := a.Client.Jobs().List(a.q(ctx))
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	var errs []error
	for _, j := range jobs {
		errs = append(errs, a.StopJob(ctx, j.ID, true, clients...))
	}
	return errors.Join(errs...)
}

// waitAllocDirGone waits until the alloc dir and the mounts in it are gone.
func (a *Agent) waitAllocDirGone(ctx context.Context, dir, jobID string) error {
	var state string
	for {
		mounts, err := hostcheck.MountsUnder(dir)
		if err != nil {
			return err
		}
		_, statErr := os.Stat(dir)
		if len(mounts) == 0 && os.IsNotExist(statErr) {
			return nil
		}
		state = fmt.Sprintf("alloc dir %s of purged job %s not yet destroyed (%d mounts)", dir, jobID, len(mounts))
		if err := a.sleep(ctx, func() string { return state }); err != nil {
			return err
		}
	}
}

// Node returns the agent's client node.
func (a *Agent) Node(ctx context.Context) (*api.Node, error) {
	node, _, err := a.Client.Nodes().Info(a.NodeID, a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", a.NodeID, err)
	}
	return node, nil
}

// NodeDevices returns the node's fingerprinted device groups
// (NodeResources.Devices: vendor/type/name, attributes, instances with IDs
// and health).
func (a *Agent) NodeDevices(ctx context.Context) ([]*api.NodeDeviceResource, error) {
	node, err := a.Node(ctx)
	if err != nil {
		return nil, err
	}
	if node.NodeResources == nil {
		return nil, nil
	}
	return node.NodeResources.Devices, nil
}

// WaitNodeDevices waits until the node has a device group with the given
// vendor and type whose instance count is n (n < 0: at least one) and
// returns all device groups.
func (a *Agent) WaitNodeDevices(ctx context.Context, vendor, typ string, n int) ([]*api.NodeDeviceResource, error) {
	var state string
	for {
		devs, err := a.NodeDevices(ctx)
		if err != nil {
			return nil, err
		}
		count := 0
		for _, d := range devs {
			if d.Vendor == vendor && d.Type == typ {
				count += len(d.Instances)
			}
		}
		if (n < 0 && count > 0) || count == n {
			return devs, nil
		}
		state = fmt.Sprintf("node has %d %s/%s device instance(s), want %d", count, vendor, typ, n)
		if err := a.sleep(ctx, func() string { return state }); err != nil {
			return devs, err
		}
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// PutVariable writes a Nomad variable. A new server takes a moment to set
// up the keyring that encrypts variables ("keyring has not been
// initialized yet"); PutVariable retries that until ctx ends.
func (a *Agent) PutVariable(ctx context.Context, v *api.Variable) error {
	for {
		_, _, err := a.Client.Variables().Create(v, a.w(ctx))
		if err == nil || !strings.Contains(err.Error(), "keyring has not been initialized") {
			return err
		}
		if err := a.sleep(ctx, func() string { return "writing variable " + v.Path + ": " + err.Error() }); err != nil {
			return err
		}
	}
}
