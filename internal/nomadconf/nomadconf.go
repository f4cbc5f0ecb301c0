package nomadconf

import (
	"fmt"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/zclconf/go-cty/cty/msgpack"

	"github.com/gpumux/gpumux/nodeconfig"
)

// Encode encodes a config body (what goes inside config { … }). A body the
// schema refuses is an error carrying Nomad's diagnostics.
func Encode(src string) ([]byte, error) {
	root, err := hcl.ParseString(src)
	if err != nil {
		return nil, fmt.Errorf("parsing the config: %w", err)
	}
	var raw map[string]any
	if err := hcl.DecodeObject(&raw, root); err != nil {
		return nil, fmt.Errorf("decoding the config: %w", err)
	}
	spec, diags := hclspecutils.Convert(nodeconfig.Spec)
	if diags.HasErrors() {
		return nil, fmt.Errorf("the schema: %w", diags)
	}
	val, diags, _ := hclutils.ParseHclInterface(raw, spec, nil)
	if diags.HasErrors() {
		return nil, diags
	}
	return msgpack.Marshal(val, val.Type())
}
