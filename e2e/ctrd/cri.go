package ctrd

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// Containerd2Version is the containerd 2.x release the tests run
// (scripts/build-containerd.sh builds it).
const Containerd2Version = "2.2.9"

// CRINamespace is the containerd namespace of CRI's pods and containers.
const CRINamespace = "k8s.io"

// ProbeImage is the image CRI runs (WithCRI on containerd 2.x): the probe
// rootfs, whose command, `/probe -sleep`, also serves as the pods' sandbox
// ("pause") container. No registry is reached: the harness imports it.
const ProbeImage = "gpumux.local/probe:e2e"

// criCgroupParent is the cgroup the harness's CRI pods run under (cgroupfs).
const criCgroupParent = "/gpumux-e2e-cri"

// Containerd2Bin returns the containerd 2.x binary: $CONTAINERD2_BIN, else
// the one scripts/build-containerd.sh caches in
// $GPUMUX_CACHE/containerd-v<Containerd2Version>/bin, beside its runc shim.
func Containerd2Bin() string {
	if b := os.Getenv("CONTAINERD2_BIN"); b != "" {
		return b
	}
	return filepath.Join(hostcheck.CacheDir(), "containerd-v"+Containerd2Version, "bin", "containerd")
}

// renderV3 writes containerd 2.x's tables: NRI's socket inside Dir
// (enabled by WithNRI, off otherwise), and with WithCRI the CRI plugins'.
func (d *Daemon) renderV3(b *strings.Builder) {
	fmt.Fprintf(b, "\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = %v\n  socket_path = %q\n  plugin_path = %q\n  plugin_config_path = %q\n  plugin_request_timeout = \"10s\"\n",
		!d.cfg.nri, d.NRISocket, filepath.Join(d.Dir, "nri", "plugins"), filepath.Join(d.Dir, "nri", "conf"))
	if !d.cfg.cri {
		return
	}
	const images, rt = `plugins."io.containerd.cri.v1.images"`, `plugins."io.containerd.cri.v1.runtime"`
	fmt.Fprintf(b, "\n[%s]\n  snapshotter = \"native\"\n[%s.pinned_images]\n  sandbox = %q\n", images, images, ProbeImage)
	// restrict_oom_score_adj: the sandbox's -998 would need
	// CAP_SYS_RESOURCE, which a test machine's root may lack.
	fmt.Fprintf(b, "\n[%s]\n  enable_cdi = true\n  cdi_spec_dirs = [%q]\n  restrict_oom_score_adj = true\n", rt, d.CDISpecDir)
	fmt.Fprintf(b, "[%s.cni]\n  bin_dirs = [%q]\n  conf_dir = %q\n", rt, filepath.Join(d.Dir, "cni", "bin"), filepath.Join(d.Dir, "cni", "conf"))
	fmt.Fprintf(b, "[%s.containerd]\n  default_runtime_name = \"runc\"\n", rt)
	classes := map[string]string{"runc": ""}
	for name, bin := range d.cfg.runtimes {
		classes[name] = bin
	}
	for name, bin := range classes {
		fmt.Fprintf(b, "[%s.containerd.runtimes.%s]\n  runtime_type = %q\n  snapshotter = \"native\"\n", rt, name, DefaultRuntime)
		if bin != "" {
			// CRI passes only the annotations a runtime class lists into
			// the OCI spec, where a runtime wrapper reads them.
			fmt.Fprintf(b, "  pod_annotations = [\"gpumux.io/*\"]\n  container_annotations = [\"gpumux.io/*\"]\n")
		}
		fmt.Fprintf(b, "[%s.containerd.runtimes.%s.options]\n  Root = %q\n  BinaryName = %q\n", rt, name, d.RuncRoot, bin)
	}
	fmt.Fprintf(b, "\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n")
}

// startCRI imports the probe image for CRI, unpacked, and waits until CRI
// answers.
func (d *Daemon) startCRI(ctx context.Context) error {
	if err := os.MkdirAll(d.CDISpecDir, 0o755); err != nil {
		return err
	}
	if err := d.importProbeImage(namespaces.WithNamespace(ctx, CRINamespace)); err != nil {
		return fmt.Errorf("importing %s: %w", ProbeImage, err)
	}
	conn, err := grpc.NewClient("unix://"+d.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	d.CRI = cri.NewRuntimeServiceClient(conn)
	for {
		_, err := d.CRI.Status(ctx, &cri.StatusRequest{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRI status: %w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// importProbeImage builds an OCI image of the probe rootfs (one
// uncompressed layer), imports it as ProbeImage and unpacks it for the
// native snapshotter.
func (d *Daemon) importProbeImage(ctx context.Context) error {
	root := filepath.Join(d.Dir, "image-rootfs")
	if err := MakeRootfs(root); err != nil {
		return err
	}
	defer os.RemoveAll(root)
	var layer bytes.Buffer
	if err := TarDir(&layer, root); err != nil {
		return err
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	blob := func(mediaType string, b []byte) (map[string]any, error) {
		dg := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		return map[string]any{"mediaType": mediaType, "digest": dg, "size": len(b)}, put("blobs/sha256/"+strings.TrimPrefix(dg, "sha256:"), b)
	}
	layerDesc, err := blob("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	if err != nil {
		return err
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{ProbePath, "-sleep"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []any{layerDesc["digest"]}},
	})
	configDesc, err := blob("application/vnd.oci.image.config.v1+json", config)
	if err != nil {
		return err
	}
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": configDesc, "layers": []any{layerDesc}})
	manifestDesc, err := blob("application/vnd.oci.image.manifest.v1+json", manifest)
	if err != nil {
		return err
	}
	manifestDesc["annotations"] = map[string]string{"io.containerd.image.name": ProbeImage}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{manifestDesc}})
	if err := errors.Join(put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)), put("index.json", index), tw.Close()); err != nil {
		return err
	}
	imgs, err := d.Client.Import(ctx, &archive)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if err := containerd.NewImage(d.Client, img).Unpack(ctx, "native"); err != nil {
			return fmt.Errorf("unpacking %s: %w", img.Name, err)
		}
	}
	return nil
}

// Pod is a CRI pod sandbox of the harness: host network, under the
// harness's cgroup parent, its containers' logs in its log directory.
type Pod struct {
	ID     string
	Config *cri.PodSandboxConfig
	d      *Daemon
}

// RunPod starts a pod sandbox named name whose containers run with the
// CRI runtime class handler ("" for runc).
func (d *Daemon) RunPod(ctx context.Context, name, handler string) (*Pod, error) {
	cfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: Namespace, Uid: name},
		LogDirectory: filepath.Join(d.Dir, "pods", name),
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    criCgroupParent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}},
		},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return nil, err
	}
	r, err := d.CRI.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return nil, fmt.Errorf("run pod %s: %w", name, err)
	}
	return &Pod{ID: r.PodSandboxId, Config: cfg, d: d}, nil
}

// CRIOpts describes a CRI container: the probe, with these annotations,
// env ("K=V") and CDI devices (fully qualified names).
type CRIOpts struct {
	Annotations map[string]string
	Env         []string
	CDIDevices  []string
	// Args is the process; default ["/probe"].
	Args []string
}

// Create creates a container in the pod and returns its ID: CRI's
// CreateContainer, where containerd applies CDI devices and NRI plugins
// adjust the container (a plugin's refusal is the error).
func (p *Pod) Create(ctx context.Context, name string, o CRIOpts) (string, error) {
	args := o.Args
	if len(args) == 0 {
		args = []string{ProbePath}
	}
	cfg := &cri.ContainerConfig{
		Metadata:    &cri.ContainerMetadata{Name: name},
		Image:       &cri.ImageSpec{Image: ProbeImage},
		Command:     args,
		Annotations: o.Annotations,
		LogPath:     name + ".log",
		Linux:       &cri.LinuxContainerConfig{},
	}
	for _, kv := range o.Env {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: k, Value: v})
	}
	for _, dev := range o.CDIDevices {
		cfg.CDIDevices = append(cfg.CDIDevices, &cri.CDIDevice{Name: dev})
	}
	r, err := p.d.CRI.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", name, err)
	}
	return r.ContainerId, nil
}

// Run runs a container to its end in the pod — create, start, wait,
// remove — and returns its exit code and output (CRI keeps one log for
// both streams: it is all in Stdout).
func (p *Pod) Run(ctx context.Context, name string, o CRIOpts) (Result, error) {
	id, err := p.Create(ctx, name, o)
	if err != nil {
		return Result{}, err
	}
	res, err := p.runCreated(ctx, id)
	if _, rerr := p.d.CRI.RemoveContainer(context.WithoutCancel(ctx), &cri.RemoveContainerRequest{ContainerId: id}); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove container %s: %w", name, rerr))
	}
	if err == nil {
		res.Stdout, err = readCRILog(filepath.Join(p.Config.LogDirectory, name+".log"))
		os.Remove(filepath.Join(p.Config.LogDirectory, name+".log"))
	}
	return res, err
}

func (p *Pod) runCreated(ctx context.Context, id string) (Result, error) {
	if _, err := p.d.CRI.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id}); err != nil {
		return Result{}, fmt.Errorf("start container %s: %w", id, err)
	}
	code, err := p.d.WaitCRI(ctx, id)
	return Result{ExitCode: code}, err
}

// WaitCRI waits until the CRI container id has exited and returns its exit
// code.
func (d *Daemon) WaitCRI(ctx context.Context, id string) (int, error) {
	for {
		st, err := d.CRI.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return -1, fmt.Errorf("container %s status: %w", id, err)
		}
		if st.Status.State == cri.ContainerState_CONTAINER_EXITED {
			return int(st.Status.ExitCode), nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("waiting for container %s: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readCRILog returns the text of a CRI log ("TIME STREAM TAG TEXT" lines,
// tag P for a partial line).
func readCRILog(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 {
			continue
		}
		out.WriteString(parts[3])
		if parts[2] != "P" {
			out.WriteByte('\n')
		}
	}
	return out.String(), sc.Err()
}

// removePods stops and removes every CRI pod (and so its containers), and
// the harness's cgroup parent.
func (d *Daemon) removePods() error {
	if d.CRI == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := d.CRI.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("cleanup: listing pods: %w", err)
	}
	var errs []error
	for _, p := range r.Items {
		if _, err := d.CRI.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: stopping pod %s: %w", p.Metadata.GetName(), err))
		}
		if _, err := d.CRI.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: removing pod %s: %w", p.Metadata.GetName(), err))
		}
	}
	hier, err := hostcheck.CgroupMounts()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var dirs []string
	for _, h := range hier {
		dirs = append(dirs, filepath.Join(h, criCgroupParent))
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("cleanup: %w", err))
		}
	}
	return errors.Join(errs...)
}
