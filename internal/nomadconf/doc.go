// Package nomadconf turns a plugin config written in HCL into what a Nomad
// agent hands the gpumux plugin: HCL1, through the plugin's schema with
// Nomad's own hclutils, to msgpack. Tests use it to feed the plugin, or
// nodeconfig.Decode, exactly as Nomad would.
package nomadconf
