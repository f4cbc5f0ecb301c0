// Package share is gpumux's share model. A node Layout assigns each GPU a
// mechanism; Build turns a GPU inventory and a Layout into a Catalog of shares
// (a whole GPU, a MIG instance, a time-slice replica, …) grouped the way a
// scheduler offers them; Edits computes, in this one place, what a container
// needs to use a set of shares: environment, device nodes and mounts.
//
// Remote GPUs (another host's, served by gpumux-remoted) join a Catalog
// through Catalog.WithRemote; their edits need the front door's token
// minting (RemoteAccess).
//
// share knows nothing of Nomad or OCI: the Nomad plugin and the OCI runtime are
// two front doors onto the same Catalog and the same Edits.
package share
