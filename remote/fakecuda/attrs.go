package fakecuda

import "github.com/gpumux/gpumux/remote/proto"

// attrMax bounds the CUdevice_attribute values the fake accepts; CUDA 12's
// enum ends below it. Known values below it that the table leaves out are 0.
const attrMax = 160

// attrs holds an H100/H200-class device's attributes by CUdevice_attribute
// number (cuda.h).
var attrs = map[int32]int32{
	1:   1024,       // MAX_THREADS_PER_BLOCK
	2:   1024,       // MAX_BLOCK_DIM_X
	3:   1024,       // MAX_BLOCK_DIM_Y
	4:   64,         // MAX_BLOCK_DIM_Z
	5:   2147483647, // MAX_GRID_DIM_X
	6:   65535,      // MAX_GRID_DIM_Y
	7:   65535,      // MAX_GRID_DIM_Z
	8:   49152,      // MAX_SHARED_MEMORY_PER_BLOCK
	9:   65536,      // TOTAL_CONSTANT_MEMORY
	10:  32,         // WARP_SIZE
	11:  2147483647, // MAX_PITCH
	12:  65536,      // MAX_REGISTERS_PER_BLOCK
	13:  1980000,    // CLOCK_RATE (kHz)
	14:  512,        // TEXTURE_ALIGNMENT
	15:  1,          // GPU_OVERLAP
	16:  132,        // MULTIPROCESSOR_COUNT
	17:  0,          // KERNEL_EXEC_TIMEOUT
	18:  0,          // INTEGRATED
	19:  1,          // CAN_MAP_HOST_MEMORY
	20:  0,          // COMPUTE_MODE (default)
	30:  512,        // SURFACE_ALIGNMENT
	31:  1,          // CONCURRENT_KERNELS
	32:  1,          // ECC_ENABLED
	34:  0,          // PCI_DEVICE_ID
	35:  0,          // TCC_DRIVER
	36:  2619000,    // MEMORY_CLOCK_RATE (kHz)
	37:  5120,       // GLOBAL_MEMORY_BUS_WIDTH
	38:  52428800,   // L2_CACHE_SIZE
	39:  2048,       // MAX_THREADS_PER_MULTIPROCESSOR
	40:  3,          // ASYNC_ENGINE_COUNT
	41:  1,          // UNIFIED_ADDRESSING
	50:  0,          // PCI_DOMAIN_ID
	75:  9,          // COMPUTE_CAPABILITY_MAJOR
	76:  0,          // COMPUTE_CAPABILITY_MINOR
	78:  1,          // STREAM_PRIORITIES_SUPPORTED
	79:  1,          // GLOBAL_L1_CACHE_SUPPORTED
	80:  1,          // LOCAL_L1_CACHE_SUPPORTED
	81:  233472,     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	82:  65536,      // MAX_REGISTERS_PER_MULTIPROCESSOR
	83:  1,          // MANAGED_MEMORY
	84:  0,          // MULTI_GPU_BOARD
	89:  1,          // CONCURRENT_MANAGED_ACCESS
	90:  1,          // COMPUTE_PREEMPTION_SUPPORTED
	95:  1,          // COOPERATIVE_LAUNCH
	97:  232448,     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	106: 32,         // MAX_BLOCKS_PER_MULTIPROCESSOR
	111: 1024,       // RESERVED_SHARED_MEMORY_PER_BLOCK
	115: 1,          // MEMORY_POOLS_SUPPORTED
}

func attribute(attr int32, dev *device) (int32, proto.Result) {
	if attr < 1 || attr >= attrMax {
		return 0, proto.ErrInvalidValue
	}
	if attr == 33 { // PCI_BUS_ID: one bus per device
		return 0x18 + dev.index*0x10, proto.Success
	}
	return attrs[attr], proto.Success
}
