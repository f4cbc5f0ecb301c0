package server

import "github.com/gpumux/gpumux/remote/proto"

// Launches with a CUlaunchConfig (cuLaunchKernelEx) and the cluster
// occupancy calls that take one. A configuration's attributes arrive as
// proto.LaunchAttr records; only those on the allow-list below reach the
// backend, rebuilt from the bytes their value is defined by (the rest of
// the 64-byte union is zero), and with the client's event handles mapped to
// the backend's events.

// launchAttrs checks a launch configuration's attributes for a function of
// ctx and returns them as the backend takes them. A malformed blob is
// CUDA_ERROR_INVALID_VALUE, an event that is not one of the client's in ctx
// CUDA_ERROR_INVALID_HANDLE, an attribute not on the allow-list (access
// policy windows, which carry a device pointer; graph and stream-only
// attributes; IDs newer than CUDA 13.0) CUDA_ERROR_NOT_SUPPORTED.
func (s *session) launchAttrs(ctx *ctxState, blob []byte) ([]proto.LaunchAttr, proto.Result) {
	in, good := proto.DecodeLaunchAttrs(blob)
	if !good {
		return nil, proto.ErrInvalidValue
	}
	out := make([]proto.LaunchAttr, 0, len(in))
	for i := range in {
		a := &in[i]
		v := proto.LaunchAttr{ID: a.ID}
		switch a.ID {
		case proto.LaunchAttrIgnore:
			continue
		case proto.LaunchAttrCooperative, proto.LaunchAttrClusterSchedulingPolicy,
			proto.LaunchAttrProgrammaticStreamSerialization, proto.LaunchAttrPriority,
			proto.LaunchAttrMemSyncDomain, proto.LaunchAttrPreferredSharedMemoryCarveout,
			proto.LaunchAttrNvlinkUtilCentricScheduling:
			v.SetU32(0, a.U32(0)) // an int or an enum
		case proto.LaunchAttrClusterDimension, proto.LaunchAttrPreferredClusterDimension:
			for j := range 3 {
				v.SetU32(j, a.U32(j)) // x, y, z
			}
		case proto.LaunchAttrMemSyncDomainMap:
			copy(v.Value[:2], a.Value[:2]) // two unsigned chars
		case proto.LaunchAttrProgrammaticEvent, proto.LaunchAttrLaunchCompletionEvent:
			// {CUevent event; int flags; int triggerAtBlockStart (programmatic only)}
			ev := s.events[proto.Handle(a.U64())]
			if ev == nil || ev.ctx != ctx {
				return nil, proto.ErrInvalidHandle
			}
			v.SetU64(uint64(ev.raw))
			v.SetU32(2, a.U32(2))
			if a.ID == proto.LaunchAttrProgrammaticEvent {
				v.SetU32(3, a.U32(3))
			}
		default:
			return nil, proto.ErrNotSupported
		}
		out = append(out, v)
	}
	return out, ok
}

// LaunchKernelEx checks like LaunchKernel, and the attributes.
func (s *session) LaunchKernelEx(c *proto.Call, h proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, hs proto.Handle, attrs, params []byte) proto.Result {
	grid, block := [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}
	f, ctx, st, r := s.launchArgs(c, h, grid, block, hs, params)
	if r != ok {
		return r
	}
	as, r := s.launchAttrs(ctx, attrs)
	if r != ok {
		return r
	}
	return s.be.LaunchKernelEx(f.raw, grid, block, shared, st, as, params)
}

// clusterConfig checks a cluster occupancy query: one of the client's
// functions, a stream of its context, the attributes; it leaves the
// function's context current.
func (s *session) clusterConfig(h, hs proto.Handle, attrs []byte) (*funcState, uintptr, []proto.LaunchAttr, proto.Result) {
	f := s.funcs[h]
	if f == nil {
		return nil, 0, nil, proto.ErrInvalidHandle
	}
	st, r := s.stream(f.mod.ctx, hs)
	if r != ok {
		return nil, 0, nil, r
	}
	as, r := s.launchAttrs(f.mod.ctx, attrs)
	if r != ok {
		return nil, 0, nil, r
	}
	if r := s.use(f.mod.ctx); r != ok {
		return nil, 0, nil, r
	}
	return f, st, as, ok
}

func (s *session) OccupancyMaxActiveClusters(c *proto.Call, h proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, hs proto.Handle, attrs []byte) (int32, proto.Result) {
	f, st, as, r := s.clusterConfig(h, hs, attrs)
	if r != ok {
		return 0, r
	}
	return s.be.OccupancyMaxActiveClusters(f.raw, [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}, shared, st, as)
}

func (s *session) OccupancyMaxPotentialClusterSize(c *proto.Call, h proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, hs proto.Handle, attrs []byte) (int32, proto.Result) {
	f, st, as, r := s.clusterConfig(h, hs, attrs)
	if r != ok {
		return 0, r
	}
	return s.be.OccupancyMaxPotentialClusterSize(f.raw, [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}, shared, st, as)
}
