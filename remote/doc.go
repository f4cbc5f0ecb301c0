// Package remote will hold remote GPUs: the wire protocol, the gpumux-remoted
// server, the C interposer that replaces libcuda.so.1 in a container, and pool
// discovery through Nomad services.
//
// It holds no code yet; the share model reserves the mechanism (share.Remote).
package remote
