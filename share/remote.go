package share

// RemoteGPU is a GPU that a gpumux-remoted server serves to the pool, as the
// pool's discovery found it (package remote/pool).
type RemoteGPU struct {
	// Addr is the server as a client dials it: "host:port" or "unix:/path"
	// (what GPUMUX_REMOTE_ADDR carries).
	Addr string
	// Index is the GPU's device ordinal on the server (the token's Device).
	Index             int
	UUID              string // GPU-…, as NVML writes it
	Model             string // e.g. "NVIDIA H200"
	MemoryMiB         uint64
	SMCount           int
	ComputeCapability string // e.g. "9.0"
	// CUDAVersion is the server's CUDA driver API version, e.g. "13.0": what
	// cuDriverGetVersion returns to a program that uses the GPU.
	CUDAVersion string
}

// MaxRemoteShares bounds the shares of one remote GPU.
const MaxRemoteShares = 48
