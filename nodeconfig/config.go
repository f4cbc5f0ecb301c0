package nodeconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	hjson "github.com/hashicorp/hcl/v2/json"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/msgpack"

	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/share"
)

// PluginName is the label of the Nomad plugin block that holds the config.
const PluginName = "nomad-device-gpumux"

// Defaults of the node config.
const (
	// DefaultFile is where gpumux agent and gpumux-runtime read the node
	// config unless told otherwise.
	DefaultFile              = "/etc/gpumux/node.hcl"
	DefaultStateDir          = "/var/lib/gpumux"
	DefaultFingerprintPeriod = time.Minute
	// DefaultMPSControl is NVIDIA's MPS control binary; simulated nodes use
	// gpumux's stand-in, which speaks the same commands.
	DefaultMPSControl   = "nvidia-cuda-mps-control"
	SimulatedMPSControl = "gpumux-fake-mps-control"
	// DefaultLimiterDir is where the limiter of time-slice replicas is
	// installed (make build puts it in bin/limiter).
	DefaultLimiterDir = "/usr/lib/gpumux/limiter"
	// DefaultRuntimeSocket is where the node's agent (the Nomad plugin, or
	// gpumux agent) serves gpumux-runtime, and where gpumux-runtime asks.
	DefaultRuntimeSocket = "/run/gpumux/runtime.sock"
)

// Spec is the node config's schema (the Nomad plugin block's config). Nomad reads agent config as HCL1,
// so mig_devices is a block of attributes: mig_devices { "3g.71gb" = 1 }.
var Spec = hclspec.NewObject(map[string]*hclspec.Spec{
	// enabled, ignored_gpu_ids and fingerprint_period are nomad-device-nvidia's
	// keys, with its defaults, so that its plugin block works here.
	"enabled":            hclspec.NewDefault(hclspec.NewAttr("enabled", "bool", false), hclspec.NewLiteral("true")),
	"ignored_gpu_ids":    hclspec.NewDefault(hclspec.NewAttr("ignored_gpu_ids", "list(string)", false), hclspec.NewLiteral("[]")),
	"group_names":        hclspec.NewDefault(hclspec.NewAttr("group_names", "string", false), hclspec.NewLiteral(`"`+string(share.NamingGpumux)+`"`)),
	"simulate":           hclspec.NewAttr("simulate", "string", false),
	"state_dir":          hclspec.NewDefault(hclspec.NewAttr("state_dir", "string", false), hclspec.NewLiteral(`"`+DefaultStateDir+`"`)),
	"fingerprint_period": hclspec.NewDefault(hclspec.NewAttr("fingerprint_period", "string", false), hclspec.NewLiteral(`"1m"`)),
	"mps_control_binary": hclspec.NewAttr("mps_control_binary", "string", false),
	"metrics_addr":       hclspec.NewAttr("metrics_addr", "string", false),
	"runtime_socket":     hclspec.NewDefault(hclspec.NewAttr("runtime_socket", "string", false), hclspec.NewLiteral(`"`+DefaultRuntimeSocket+`"`)),
	"limiter_dir":        hclspec.NewDefault(hclspec.NewAttr("limiter_dir", "string", false), hclspec.NewLiteral(`"`+DefaultLimiterDir+`"`)),
	"driver_root":        hclspec.NewAttr("driver_root", "string", false),
	"gpu": hclspec.NewBlockList("gpu", hclspec.NewObject(map[string]*hclspec.Spec{
		"match":         hclspec.NewAttr("match", "string", true),
		"mechanism":     hclspec.NewAttr("mechanism", "string", true),
		"replicas":      hclspec.NewAttr("replicas", "number", false),
		"mig_devices":   hclspec.NewBlockAttrs("mig_devices", "number", false),
		"shares":        hclspec.NewAttr("shares", "number", false),
		"share_sizes":   hclspec.NewAttr("share_sizes", "list(string)", false),
		"replica_sizes": hclspec.NewAttr("replica_sizes", "list(string)", false),
		"limit":         hclspec.NewAttr("limit", "string", false),
	})),
	"remote": remoteSpec,
	"nri":    nriSpec,
})

// Config is the decoded plugin config.
type Config struct {
	// Enabled false makes the node offer nothing: the plugin fingerprints
	// no devices (as nomad-device-nvidia's enabled = false) and node.Open
	// refuses, for every front door. Nil (a config without the key) is true.
	Enabled *bool `codec:"enabled"`
	// IgnoredGPUIDs are UUIDs of GPUs ("GPU-…") and MIG instances ("MIG-…")
	// the node does not offer (nomad-device-nvidia's ignored_gpu_ids). An
	// ignored GPU is left alone altogether: no gpu block matches it.
	IgnoredGPUIDs []string `codec:"ignored_gpu_ids"`
	// GroupNames is how whole GPUs' and MIG instances' device groups are
	// named: share.NamingGpumux ("H200") or share.NamingNVIDIA ("NVIDIA H200",
	// as nomad-device-nvidia names them).
	GroupNames        share.Naming `codec:"group_names"`
	Simulate          string       `codec:"simulate"`
	StateDir          string       `codec:"state_dir"`
	FingerprintPeriod string       `codec:"fingerprint_period"`
	MPSControlBinary  string       `codec:"mps_control_binary"`
	// LimiterDir holds gpumux's limiter (its libcuda.so.1 and
	// libnvidia-ml.so.1), mounted into the containers of limited
	// time-slice replicas.
	LimiterDir string `codec:"limiter_dir"`
	// DriverRoot is where the NVIDIA driver's user-space files (libcuda,
	// libnvidia-ml, nvidia-smi) are, which containers of local shares get:
	// "/" unless the driver lives elsewhere (a containerized driver's
	// root, as the NVIDIA container toolkit's root). Empty means "/" on a
	// real node and the simulated driver on a simulated one.
	DriverRoot string `codec:"driver_root"`
	// MetricsAddr, when set, is where the node agent (the plugin, or
	// gpumux agent) serves Prometheus metrics at /metrics: "host:port".
	MetricsAddr string `codec:"metrics_addr"`
	// RuntimeSocket is where the Nomad plugin serves gpumux-runtime's
	// creates and hooks, as gpumux agent does on its --runtime-socket: a
	// unix socket only root reaches; "" serves none.
	RuntimeSocket string          `codec:"runtime_socket"`
	GPUs          []share.GPURule `codec:"gpu"`
	// Remote, when set, offers GPUs of gpumux-remoted servers (remote.go).
	Remote *Remote `codec:"remote"`
	// NRI, when set, has gpumux agent serve an NRI plugin (nri.go).
	NRI    *NRI          `codec:"nri"`
	period time.Duration // parsed FingerprintPeriod
}

// normalize fills defaults and parses derived fields; Validate reports errors.
func (c *Config) normalize() {
	if c.Enabled == nil {
		enabled := true
		c.Enabled = &enabled
	}
	if c.GroupNames == "" {
		c.GroupNames = share.NamingGpumux
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.LimiterDir == "" {
		c.LimiterDir = DefaultLimiterDir
	}
	if c.MPSControlBinary == "" {
		c.MPSControlBinary = DefaultMPSControl
		if c.Simulate != "" {
			c.MPSControlBinary = SimulatedMPSControl
		}
	}
	c.period = DefaultFingerprintPeriod
	if c.FingerprintPeriod != "" {
		if d, err := time.ParseDuration(c.FingerprintPeriod); err == nil {
			c.period = d
		}
	}
	if c.Remote != nil {
		c.Remote.normalize()
	}
	if c.NRI != nil {
		c.NRI.normalize()
	}
}

// IsEnabled reports whether the node offers anything (enabled, default true).
func (c *Config) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// Ignored reports whether uuid, a GPU's or a MIG instance's, is in
// ignored_gpu_ids.
func (c *Config) Ignored(uuid string) bool { return slices.Contains(c.IgnoredGPUIDs, uuid) }

// Period is the parsed fingerprint_period.
func (c *Config) Period() time.Duration { return c.period }

// Layout is the config's gpu blocks as a node layout.
func (c *Config) Layout() *share.Layout { return &share.Layout{GPUs: c.GPUs} }

// Validate checks the config without touching GPUs, naming field, value and
// what is valid.
func (c *Config) Validate() error {
	var errs []error
	if c.Simulate != "" && !slices.Contains(sim.Names(), c.Simulate) {
		errs = append(errs, fmt.Errorf("simulate = %q: not a simulated node (valid: %v, or omit it on real hardware)", c.Simulate, sim.Names()))
	}
	if c.FingerprintPeriod != "" {
		if d, err := time.ParseDuration(c.FingerprintPeriod); err != nil || d < time.Second {
			errs = append(errs, fmt.Errorf("fingerprint_period = %q: want a duration of at least 1s with its unit, e.g. \"30s\", \"1m\" or \"1h30m\"", c.FingerprintPeriod))
		}
	}
	errs = append(errs, checkIgnoredIDs(c.IgnoredGPUIDs)...)
	if !slices.Contains(share.Namings, c.GroupNames) && c.GroupNames != "" {
		errs = append(errs, fmt.Errorf("group_names = %q: want one of %q (%q names whole GPUs \"H200\", %q names them \"NVIDIA H200\" as nomad-device-nvidia does)",
			c.GroupNames, share.Namings, share.NamingGpumux, share.NamingNVIDIA))
	}
	if c.DriverRoot != "" && (!filepath.IsAbs(c.DriverRoot) || filepath.Clean(c.DriverRoot) != c.DriverRoot) {
		errs = append(errs, fmt.Errorf("driver_root = %q: want a clean absolute path, e.g. \"/\" or \"/run/nvidia/driver\"", c.DriverRoot))
	}
	if c.MetricsAddr != "" {
		if err := checkListenAddr(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("metrics_addr = %q: %w", c.MetricsAddr, err))
		}
	}
	if c.RuntimeSocket != "" && (!filepath.IsAbs(c.RuntimeSocket) || filepath.Clean(c.RuntimeSocket) != c.RuntimeSocket) {
		errs = append(errs, fmt.Errorf("runtime_socket = %q: want a clean absolute path, e.g. %q, or \"\" to serve none", c.RuntimeSocket, DefaultRuntimeSocket))
	}
	if err := c.Layout().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Remote != nil {
		if err := c.Remote.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NRI != nil {
		if err := c.NRI.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	// GPU and MIG UUIDs have the same length.
	pipe := mps.PipeDirIn(c.StateDir, "GPU-00000000-0000-0000-0000-000000000000")
	if n := len(pipe); c.usesMPS() && n > mps.MaxPipeDir {
		errs = append(errs, fmt.Errorf("state_dir = %q: too long for MPS: its pipe directory %s would be %d bytes, and nvidia-cuda-mps-control -d fails without a message past %d; use a state_dir of at most %d bytes",
			c.StateDir, pipe, n, mps.MaxPipeDir, len(c.StateDir)-(n-mps.MaxPipeDir)))
	}
	return errors.Join(errs...)
}

// checkIgnoredIDs checks that each of ignored_gpu_ids is a GPU or MIG UUID
// as nvidia-smi -L prints it, and that none is listed twice.
func checkIgnoredIDs(ids []string) []error {
	var errs []error
	seen := map[string]bool{}
	for i, id := range ids {
		switch {
		case !gpuOrMIGUUID.MatchString(id):
			errs = append(errs, fmt.Errorf("ignored_gpu_ids[%d] = %q: want the UUID of a GPU or MIG instance as nvidia-smi -L prints it, e.g. \"GPU-c70bf8d8-08b9-e783-2313-aaab3311dacf\" or \"MIG-…\"", i, id))
		case seen[id]:
			errs = append(errs, fmt.Errorf("ignored_gpu_ids[%d] = %q: listed twice", i, id))
		}
		seen[id] = true
	}
	return errs
}

// gpuOrMIGUUID matches "GPU-<uuid>" and "MIG-<uuid>", and the MIG device
// names of drivers before R470, "MIG-GPU-<uuid>/<gi>/<ci>".
var gpuOrMIGUUID = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$|^MIG-GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/[0-9]+/[0-9]+$`)

// checkListenAddr checks a "host:port" to listen on (port 0 to 65535; an
// empty host listens on every address).
func checkListenAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port, e.g. \"127.0.0.1:9400\" (%v)", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want 0 to 65535", port)
	}
	return nil
}

func (c *Config) usesMPS() bool {
	for _, r := range c.GPUs {
		if r.Mechanism == share.MPS {
			return true
		}
	}
	return false
}

// ParseConfig reads the plugin config from HCL1 text, exactly as a Nomad
// agent does: HCL1 into a map, through the hclspec schema, to msgpack, then
// into Config. The text is either a config body (what goes inside the plugin
// block's config { … }) or Nomad agent config holding a
// plugin "nomad-device-gpumux" block, so one file can serve the Nomad client
// and the other front doors.
func ParseConfig(src []byte) (*Config, error) {
	packed, err := pack(src)
	if err != nil {
		return nil, err
	}
	return Decode(packed)
}

// pack turns ParseConfig's HCL1 text into the msgpack a Nomad agent sends.
func pack(src []byte) ([]byte, error) {
	root, err := hcl.ParseBytes(src)
	if err != nil {
		return nil, fmt.Errorf("parsing config: %w", err)
	}
	body := ast.Node(root.Node)
	if list, ok := root.Node.(*ast.ObjectList); ok {
		if blocks := list.Filter("plugin", PluginName); len(blocks.Items) > 0 {
			body = &ast.ObjectList{}
			if obj, ok := blocks.Items[0].Val.(*ast.ObjectType); ok {
				if cfg := obj.List.Filter("config"); len(cfg.Items) > 0 {
					body = cfg.Items[0].Val
				}
			}
		}
	}
	var raw map[string]any
	if err := hcl.DecodeObject(&raw, body); err != nil {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	spec, diags := hclspecutils.Convert(Spec)
	if diags.HasErrors() {
		return nil, fmt.Errorf("config schema: %w", diags)
	}
	val, err := decodeBody(raw, spec)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	packed, err := msgpack.Marshal(val, val.Type())
	if err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}
	return packed, nil
}

// msgpackHandle decodes what Nomad's agent encodes a plugin's config with
// (the handle of Nomad's plugins/base, MsgPackDecode's): strings as
// strings, maps as map[string]any, times in the old binary form, struct
// fields by their codec tags only. It is set here, not taken from
// plugins/base, because that package's gRPC, protobuf and Nomad structs
// cost every gpumux-runtime-core start ~5 ms of initialisation
// (docs/benchmarks.md); TestDecodeAsNomad decodes the same bytes both ways.
var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.BasicHandle.TimeNotBuiltin = true
	h.MapType = reflect.TypeOf(map[string]any(nil))
	h.TypeInfos = codec.NewTypeInfos([]string{"codec"})
	return h
}()

// Decode decodes the msgpack config a Nomad agent sends, fills defaults and
// validates it.
func Decode(packed []byte) (*Config, error) {
	var cfg Config
	if len(packed) != 0 {
		if err := codec.NewDecoderBytes(packed, msgpackHandle).Decode(&cfg); err != nil {
			return nil, fmt.Errorf("decoding the gpumux config: %w", err)
		}
	}
	cfg.normalize()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gpumux config: %w", err)
	}
	return &cfg, nil
}

// decodeBody turns HCL1's decoded map into a value of the schema, the way
// Nomad's agent does (hclutils.ParseHclInterface: as JSON through HCL2's JSON
// body and hcldec), without that package's dependency on Nomad's server
// structs, which would make every gpumux-runtime start pay for their
// initialisation.
func decodeBody(raw map[string]any, spec hcldec.Spec) (cty.Value, error) {
	js, err := json.Marshal(raw)
	if err != nil {
		return cty.NilVal, err
	}
	file, diags := hjson.Parse(js, "config")
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	val, diags := hcldec.Decode(file.Body, spec, &hcl2.EvalContext{})
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	return val, nil
}
