package server

import "github.com/gpumux/gpumux/remote/proto"

// GpumuxShareMemory answers gpumux's NVML library of remote shares
// (remote/nvml): the share's memory as this server accounts it, without a
// context, so that nvidia-smi or a monitoring thread costs the GPU nothing.
//
// total is what cuDeviceTotalMem reports: the connection's quota, or the
// device's memory if smaller (or without a quota). used is what the quota
// has taken, total less what cuMemGetInfo reports free as far as the quota
// bounds it (the token ID's connections together, or this token's, whichever
// is fuller); without a quota, what the ID's connections hold. own is what
// this connection holds (cuMemAlloc bytes, as the quota counts them) and
// contexts how many contexts it has: the NVML library lists the calling
// process as a running process when it has one.
func (s *session) GpumuxShareMemory(c *proto.Call, dev int32) (total, used, own uint64, contexts uint32, r proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return 0, 0, 0, 0, r
	}
	devTotal, r := s.be.DeviceTotalMem(real)
	if r != ok {
		return 0, 0, 0, 0, r
	}
	if limit, left := s.quota.left(); limit > 0 {
		total, used = min(devTotal, limit), limit-left
	} else {
		total, used = devTotal, s.quota.used()
	}
	return total, min(used, total), s.inUse, uint32(len(s.ctxs)), ok
}
