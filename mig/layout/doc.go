// Package layout reads MIG layout files: which GPUs of a node run in MIG
// mode and which MIG devices each carries. It reads gpumux's own format and,
// unchanged, mig-parted's, so that existing mig-parted users bring their
// files.
//
// # gpumux's format
//
//	version: gpumux.io/v1
//	gpus:
//	  # GPUs 0 to 3: one 3g.71gb and two 2g.35gb devices each
//	  - match: "0-3"
//	    mig-enabled: true
//	    mig-devices:
//	      3g.71gb: 1
//	      2g.35gb: 2
//	  # GPU 4: MIG mode, no devices yet
//	  - match: "4"
//	    mig-enabled: true
//	    mig-devices: {}
//	  # one GPU by UUID: seven of the smallest profile
//	  - match: GPU-5c6a1f0e-93c4-4f71-9a3e-2b1d0c9e8f7a
//	    mig-enabled: true
//	    mig-devices:
//	      1g.18gb: 7
//	  # GPUs 5 and 6, if they are H200 boards (PCI id 0x233510DE): MIG off
//	  - match: "5,6"
//	    device-filter: ["0x233510DE"]
//	    mig-enabled: false
//	  # every A100, if this node has any: MIG off
//	  - match: "*A100*"
//	    mig-enabled: false
//
// GPU 7, which no rule selects, keeps whatever layout it has.
//
// The keys:
//
//   - version (required): gpumux.io/v1.
//   - gpus (required): the rules, a list; gpus: [] for none.
//   - match (required): which GPUs, as in the node config's gpu blocks:
//     GPU indexes and ranges ("0-3", "4,5"), GPU UUIDs ("GPU-…", comma
//     separated), or a glob over the model name ("*H200*"); also all (or
//     "*") for every GPU. Quote values that start with *.
//   - device-filter (optional): further keeps only GPUs with one of these
//     PCI ids, written as mig-parted writes them: 0x<device><vendor>
//     ("0x233510DE" is an H200), optionally :0x<subsystem device><vendor>
//     for one board. One id or a list.
//   - mig-enabled (required): true or false.
//   - mig-devices: MIG profile name → count, each count 1 or more. Required
//     when mig-enabled is true ({} for MIG mode without devices); absent or
//     {} when it is false. Profile names are NVIDIA's, as nvidia-smi and
//     mig-parted print them (3g.71gb, 1g.18gb+me).
//
// Decoding is strict: unknown keys, duplicate keys, values of the wrong type,
// a missing or unknown version and a second YAML document are errors. Each
// error reads "file:line: field: value: what is valid", for example
//
//	node.yaml:4: gpus[0].mig-enabled: "yes": want true or false
//	node.yaml:5: gpus[0].mig_devices: unknown key (did you mean mig-devices?); valid keys: match, device-filter, mig-enabled, mig-devices
//	node.yaml:8: gpus[1].mig-devices: "1g.10gb": no such MIG profile on GPUs 4-7 (NVIDIA H200); valid: 1g.18gb (up to 7), …
//
// (the last from Layout.For, which checks rules against a node's GPUs).
// Parse and For report every error, not only the first.
//
// # mig-parted's format
//
// A file whose version is v1 is read as mig-parted writes it
// (github.com/NVIDIA/mig-parted, api/spec/v1):
//
//	version: v1
//	mig-configs:
//	  all-1g.18gb:
//	    - devices: all
//	      mig-enabled: true
//	      mig-devices:
//	        "1g.18gb": 7
//	  custom:
//	    - devices: [0, 1]
//	      device-filter: ["0x233510DE"]
//	      mig-enabled: false
//	    - devices: [2]
//	      mig-enabled: true
//	      mig-devices: {"3g.71gb": 2}
//
// The config argument of Parse (gpumux's -c) names the config to use; it may
// be empty when the file has only one, as with mig-parted. Every config of
// the file is checked, with mig-parted's rules: devices (all, or a list of
// indexes) and mig-enabled are required, mig-devices is required when
// mig-enabled is true and must be empty when it is false, and counts are 0
// or more (0 means none). gpumux's format has no named configs: passing a
// config with it is an error.
//
// # Resolving a layout on a node
//
// Layout.For says what the layout wants of each GPU of a node. A GPU that no
// rule selects is left out: the layout says nothing about it, so one file
// can serve nodes of different shapes (mig-parted's apply leaves such GPUs
// alone too). A GPU index that the node does not have (match: "0,42" or
// devices: [0, 42] on an 8-GPU node) is an error naming the rule, the value
// and the node's indexes, in both formats: mig-parted skips such an index
// without a word, which leaves a GPU the author meant unconfigured.
//
// When two rules select one GPU, the format decides:
//
//   - gpumux's format: an error naming both rules, as in gpumux's node
//     config, since an overlap there is almost always a mistake.
//   - mig-parted's format: the later rule wins. mig-parted applies every
//     rule that selects a GPU, in file order, and its assert keeps the last
//     one's verdict, so a file such as "devices: all, mig-enabled: false"
//     followed by "devices: [0], mig-enabled: true" means GPU 0 in MIG mode
//     and the others not. gpumux gives mig-parted's files that meaning, and
//     goes straight to the final state.
//
// Every rule is checked against every GPU it selects, a rule that a later
// one overrides included (mig-parted would apply it, and fail on it): MIG
// support, the profiles the model has, how many of each fit on an empty GPU
// and whether the whole set has non-overlapping placements (mig.Fit). A rule
// with mig-enabled: false fits any GPU, with MIG support or without, as in
// mig-parted.
//
// Device filters need the GPUs' PCI ids, which gpu.GPU does not carry: For
// reads them from /sys/bus/pci/devices, or from Layout.PCIID when set.
//
// Export writes a node's current layout in gpumux's format, one rule per
// GPU by UUID; reading it back and resolving it on the same node gives the
// current layout. ExportMIGParted writes it in mig-parted's format, one
// config ("current") with GPUs of one layout in one entry, by index. Layout.Marshal writes any layout in gpumux's format, which
// turns mig-parted configs into gpumux files; a config whose rules overlap
// becomes a file that For rejects on the GPUs where they do.
package layout
