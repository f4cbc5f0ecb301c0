package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/ocicreate"
	"github.com/gpumux/gpumux/share"
)

// CDIKind is the CDI kind of gpumux's shares: a CDI-native engine names one
// as gpumux.io/share=<name>.
const CDIKind = "gpumux.io/share"

// cdiOptions are gpumux cdi generate's flags.
type cdiOptions struct {
	node             nodeFlags
	file, hookBinary string
	output           string // the deprecated --output FILE
}

func newCDICmd(stdout, stderr io.Writer) *cobra.Command {
	var o cdiOptions
	gen := leaf("generate [-f FILE]", "a CDI spec with one device per share, for CDI-native engines", fmt.Sprintf(`
Writes a CDI spec (kind %s) with one device per share the node offers under
its layout, carrying the same edits as the Nomad plugin and gpumux-runtime
(device nodes, environment, mounts: the host driver's libraries and
nvidia-smi among them, and the update-ldcache hook that adds the libraries
to the container's linker cache, which gpumux-runtime runs): for CDI-native engines (containerd 2.x, Docker 25+, Podman), e.g.
  podman run --device %s=<name> …
A CDI device is handed out as named, with no lease: use gpumux-runtime for
shares that must not be given twice. Names are share IDs with "/" as "_".
The spec is JSON, on standard output or in the file -f/--file names (read
back and validated before it replaces the file). --output FILE, the flag's
name before -f/--file, still works but is deprecated: it says so on stderr.

Exit codes: 0 ok, 1 error, 2 bad flags.`, CDIKind, CDIKind), func(ctx context.Context) int { return runCDI(ctx, &o, stdout, stderr) })
	o.node.register(gen)
	gen.Flags().StringVarP(&o.file, "file", "f", "", "write the spec to `FILE` (e.g. /etc/cdi/gpumux.json) instead of standard output")
	gen.MarkFlagFilename("file", "json")
	gen.Flags().StringVar(&o.hookBinary, "hook-binary", "", "the program `PATH` whose update-ldcache hook the spec names: gpumux-runtime, which asks gpumux agent to do it and hands it to gpumux-runtime-hook where no agent does, or gpumux-runtime-hook itself (default: gpumux-runtime on PATH or next to gpumux, else "+node.DefaultHookBinary+")")
	gen.MarkFlagFilename("hook-binary")
	// --runtime-binary: its name before the hook had a program of its own.
	gen.Flags().StringVar(&o.hookBinary, "runtime-binary", "", "the same as --hook-binary")
	gen.Flags().MarkHidden("runtime-binary")
	deprecatedFileFlag(gen, &o.output)
	return group("cdi", "CDI specs of the node's shares", gen)
}

func runCDI(ctx context.Context, o *cdiOptions, stdout, stderr io.Writer) int {
	file, ok := fileFlag("cdi generate", o.file, o.output, stderr)
	if !ok {
		return ExitUsage
	}
	var opts []node.Option
	if o.hookBinary != "" {
		opts = append(opts, node.WithHookBinary(o.hookBinary))
	}
	opts = append(opts, node.WithHookEnv(ocicreate.HookEnv(os.Getenv(ocicreate.EnvSocket))...))
	spec, err := cdiSpec(ctx, &o.node, stderr, opts...)
	if err == nil {
		err = writeCDI(spec, file, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpumux cdi generate: %v\n", err)
		return ExitError
	}
	return ExitOK
}

// cdiSpec builds the spec of every share the node offers. Remote shares are
// not among them: their edits carry a token per container, which a CDI spec
// handed to every container cannot. A share whose edits cannot be made now
// (a limited replica without the limiter installed) is left out, and said
// so on warn, so that the others are still served. A hook program that is
// not installed is said on warn too: containers given such a device would
// fail to start.
func cdiSpec(ctx context.Context, nf *nodeFlags, warn io.Writer, opts ...node.Option) (*cdispec.Spec, error) {
	n, err := nf.open(opts...)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	c, err := n.Catalog(ctx, node.Local())
	if err != nil {
		return nil, err
	}
	spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: CDIKind}
	var missing []string // hook programs not installed, said once each
	for _, s := range c.Shares() {
		edits, err := n.Edits([]share.Share{s})
		if err != nil {
			fmt.Fprintf(warn, "gpumux cdi generate: %s left out: %v\n", s.ID, err)
			continue
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           CDIName(s.ID),
			Annotations:    map[string]string{"gpumux.io/share": s.ID, "gpumux.io/mechanism": string(s.Mechanism)},
			ContainerEdits: *node.CDIEdits(edits),
		})
		for _, h := range edits.Hooks {
			if _, err := os.Stat(h.Path); err != nil && !slices.Contains(missing, h.Path) {
				missing = append(missing, h.Path)
				fmt.Fprintf(warn, "gpumux cdi generate: warning: hook program %s: %v (install gpumux-runtime there, or give --runtime-binary)\n", h.Path, err)
			}
		}
	}
	// The oldest CDI version with what the spec uses, not the library's
	// newest: engines read only the versions they know (Docker 26 vendors
	// CDI 0.6 and refuses a 1.0.0 spec's devices as unresolvable).
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("the CDI spec's version: %w", err)
	}
	spec.Version = v
	return spec, nil
}

// CDIName is a share's CDI device name: its ID, with "/" (not allowed in CDI
// names) as "_".
func CDIName(id string) string { return strings.ReplaceAll(id, "/", "_") }

// writeCDI writes the spec as JSON, to a file (checked by the CDI library
// reading it back) or to w.
func writeCDI(spec *cdispec.Spec, path string, w io.Writer) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if path == "" {
		_, err = w.Write(append(b, '\n'))
		return err
	}
	if filepath.Ext(path) != ".json" {
		return fmt.Errorf("--file %q: CDI reads .json (or .yaml) files; this command writes JSON, so name it *.json", path)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if _, err := cdi.ReadSpec(tmp, 0); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("the generated spec does not validate: %w", err)
	}
	return os.Rename(tmp, path)
}
