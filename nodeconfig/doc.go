// Package nodeconfig is a node's gpumux configuration: the keys of the Nomad
// plugin block's config, which the OCI runtime and the CLI read from a file
// (default /etc/gpumux/node.hcl) with the same schema. ParseConfig decodes
// HCL1 exactly as a Nomad agent does; Decode takes what the agent sends.
package nodeconfig
