package server

import "github.com/gpumux/gpumux/remote/proto"

// The calls PyTorch's CUDA initialisation and its kernels make besides the
// basic ones: stream priorities and flags, capture status, events recorded
// with flags, function attributes and occupancy.

// CtxGetStreamPriorityRange is the driver's answer for the current context.
func (s *session) CtxGetStreamPriorityRange(c *proto.Call) (int32, int32, proto.Result) {
	if _, r := s.current(c); r != ok {
		return 0, 0, r
	}
	return s.be.CtxStreamPriorityRange()
}

// StreamCreateWithPriority makes a stream in the current context; the
// driver clamps the priority to its range.
func (s *session) StreamCreateWithPriority(c *proto.Call, flags uint32, priority int32) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.StreamCreateWithPriority(flags, priority)
	if r != ok {
		return 0, r
	}
	st := &streamState{h: s.handle(), raw: raw, ctx: ctx, flags: flags, priority: priority, withPriority: true}
	s.streams[st.h] = st
	return st.h, ok
}

func (s *session) StreamGetPriority(c *proto.Call, h proto.Handle) (int32, proto.Result) {
	raw, r := s.ownStream(c, h)
	if r != ok {
		return 0, r
	}
	return s.be.StreamPriority(raw)
}

func (s *session) StreamGetFlags(c *proto.Call, h proto.Handle) (uint32, proto.Result) {
	raw, r := s.ownStream(c, h)
	if r != ok {
		return 0, r
	}
	return s.be.StreamFlags(raw)
}

// StreamIsCapturing is the driver's answer, but for a capture the server
// invalidated (calls_graph.go), which is invalidated whatever the driver
// says. PyTorch asks it around most calls, capturing or not.
func (s *session) StreamIsCapturing(c *proto.Call, h proto.Handle) (int32, proto.Result) {
	key, r := s.captureStream(c, h)
	if r != ok {
		return 0, r
	}
	status, r := s.be.StreamIsCapturing(key.raw)
	if r != ok || status != proto.CaptureActive || !s.anyInvalidated() {
		return status, r
	}
	if _, id, _, _, _, r := s.be.StreamCaptureInfo(key.raw); r == ok && s.captures[id] != nil && s.captures[id].invalidated {
		return proto.CaptureInvalidated, ok
	}
	return status, ok
}

// EventRecordWithFlags checks like EventRecord.
func (s *session) EventRecordWithFlags(c *proto.Call, he, hs proto.Handle, flags uint32) proto.Result {
	e, st, r := s.recordArgs(c, he, hs)
	if r != ok {
		return r
	}
	return s.be.EventRecordWithFlags(e.raw, st, flags)
}

// FuncSetAttribute sets an attribute of one of the client's functions in
// its own context; the driver checks the attribute and the value.
func (s *session) FuncSetAttribute(c *proto.Call, h proto.Handle, attrib, value int32) proto.Result {
	f := s.funcs[h]
	if f == nil {
		return proto.ErrInvalidHandle
	}
	if r := s.use(f.mod.ctx); r != ok {
		return r
	}
	if r := s.be.FuncSetAttribute(f.raw, attrib, value); r != ok {
		return r
	}
	if f.attrs == nil {
		f.attrs = map[int32]int32{}
	}
	f.attrs[attrib] = value
	return ok
}

func (s *session) OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(c *proto.Call, h proto.Handle, blockSize int32, smem uint64, flags uint32) (int32, proto.Result) {
	f := s.funcs[h]
	if f == nil {
		return 0, proto.ErrInvalidHandle
	}
	if blockSize <= 0 {
		return 0, proto.ErrInvalidValue
	}
	if r := s.use(f.mod.ctx); r != ok {
		return 0, r
	}
	return s.be.OccupancyMaxActiveBlocks(f.raw, blockSize, smem, flags)
}

func (s *session) OccupancyAvailableDynamicSMemPerBlock(c *proto.Call, h proto.Handle, numBlocks, blockSize int32) (uint64, proto.Result) {
	f := s.funcs[h]
	if f == nil {
		return 0, proto.ErrInvalidHandle
	}
	if numBlocks <= 0 || blockSize <= 0 {
		return 0, proto.ErrInvalidValue
	}
	if r := s.use(f.mod.ctx); r != ok {
		return 0, r
	}
	return s.be.OccupancyAvailableDynamicSMem(f.raw, numBlocks, blockSize)
}

// CtxGetLimit is the driver's answer for the current context; the limit is
// a plain number the driver checks.
func (s *session) CtxGetLimit(c *proto.Call, limit uint32) (uint64, proto.Result) {
	if _, r := s.current(c); r != ok {
		return 0, r
	}
	return s.be.CtxGetLimit(limit)
}
