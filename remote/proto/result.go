package proto

import "fmt"

// Result is a CUresult: what a forwarded call returns to the program.
type Result int32

// The CUresult values gpumux produces itself (the backend passes any other
// through unchanged). The numbers are CUDA's ABI.
const (
	Success             Result = 0
	ErrInvalidValue     Result = 1
	ErrOutOfMemory      Result = 2
	ErrNotInitialized   Result = 3
	ErrDeinitialized    Result = 4
	ErrNoDevice         Result = 100
	ErrInvalidDevice    Result = 101
	ErrInvalidImage     Result = 200
	ErrInvalidContext   Result = 201
	ErrNoBinaryForGPU   Result = 209
	ErrAlreadyMapped    Result = 208
	ErrInvalidSource    Result = 300
	ErrNotFound         Result = 500
	ErrInvalidHandle    Result = 400
	ErrNotReady         Result = 600
	ErrIllegalAddress   Result = 700
	ErrLaunchFailed     Result = 719
	ErrNotPermitted     Result = 800
	ErrNotSupported     Result = 801
	ErrSystemNotReady   Result = 802
	ErrUnknown          Result = 999
	ErrInvalidPTX       Result = 218
	ErrLaunchOutOfResrc Result = 701
	ErrUnsupportedLimit Result = 215

	ErrPeerAccessUnsupported    Result = 217
	ErrPeerAccessAlreadyEnabled Result = 704
	ErrPeerAccessNotEnabled     Result = 705
	ErrIllegalState             Result = 401
	ErrLossyQuery               Result = 402
	ErrStreamCaptureUnsupported Result = 900
	ErrStreamCaptureInvalidated Result = 901
	ErrStreamCaptureMerge       Result = 902
	ErrStreamCaptureUnmatched   Result = 903
	ErrStreamCaptureIsolation   Result = 905
	ErrStreamCaptureImplicit    Result = 906
	ErrCapturedEvent            Result = 907
	ErrStreamCaptureWrongThread Result = 908
)

var resultNames = map[Result]string{
	Success:             "CUDA_SUCCESS",
	ErrInvalidValue:     "CUDA_ERROR_INVALID_VALUE",
	ErrOutOfMemory:      "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized:   "CUDA_ERROR_NOT_INITIALIZED",
	ErrDeinitialized:    "CUDA_ERROR_DEINITIALIZED",
	ErrNoDevice:         "CUDA_ERROR_NO_DEVICE",
	ErrInvalidDevice:    "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidImage:     "CUDA_ERROR_INVALID_IMAGE",
	ErrInvalidContext:   "CUDA_ERROR_INVALID_CONTEXT",
	ErrNoBinaryForGPU:   "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrAlreadyMapped:    "CUDA_ERROR_ALREADY_MAPPED",
	ErrInvalidSource:    "CUDA_ERROR_INVALID_SOURCE",
	ErrNotFound:         "CUDA_ERROR_NOT_FOUND",
	ErrInvalidHandle:    "CUDA_ERROR_INVALID_HANDLE",
	ErrNotReady:         "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress:   "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrLaunchFailed:     "CUDA_ERROR_LAUNCH_FAILED",
	ErrNotPermitted:     "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported:     "CUDA_ERROR_NOT_SUPPORTED",
	ErrSystemNotReady:   "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrUnknown:          "CUDA_ERROR_UNKNOWN",
	ErrInvalidPTX:       "CUDA_ERROR_INVALID_PTX",
	ErrLaunchOutOfResrc: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrUnsupportedLimit: "CUDA_ERROR_UNSUPPORTED_LIMIT",

	ErrPeerAccessUnsupported:    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	ErrPeerAccessAlreadyEnabled: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	ErrPeerAccessNotEnabled:     "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	ErrIllegalState:             "CUDA_ERROR_ILLEGAL_STATE",
	ErrLossyQuery:               "CUDA_ERROR_LOSSY_QUERY",
	ErrStreamCaptureUnsupported: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrStreamCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrStreamCaptureMerge:       "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	ErrStreamCaptureUnmatched:   "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	ErrStreamCaptureIsolation:   "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	ErrStreamCaptureImplicit:    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	ErrCapturedEvent:            "CUDA_ERROR_CAPTURED_EVENT",
	ErrStreamCaptureWrongThread: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	Moved:                       "GPUMUX_MOVED",
}

func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}
