package sim

import (
	"fmt"
	"reflect"
)

// The simulator's handles embed the generated func-field structs of
// zz_generated.funcs.go (funcInterface, funcDevice, ...) rather than
// go-nvml's mocks: those record every call in a slice that is never freed
// and panic on a nil ...Func field. A generated method with a nil Func
// returns zero values and ERROR_NOT_SUPPORTED; funcInterface's XxxYyy(h, ...)
// calls h.Yyy(...) for a Device, GpuInstance, ComputeInstance or EventSet
// handle h.

// isNilHandle reports whether h is nil or a nil pointer in an interface;
// funcInterface's forwarding methods return ERROR_INVALID_ARGUMENT for one,
// as the real library does for a NULL handle.
func isNilHandle(h any) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// extensions implements nvml.ExtendedInterface.
type extensions struct{}

func (extensions) LookupSymbol(symbol string) error { return lookupSymbol(symbol) }

// handlerSymbols are the NVML symbols whose go-nvml wrappers return helper
// structs that call libnvml directly (and abort the process without a
// driver). LookupSymbol reports them as missing.
var handlerSymbols = map[string]bool{
	"nvmlDeviceGetGpuInstanceProfileInfoV":          true,
	"nvmlDeviceGetGpuInstanceProfileInfoByIdV":      true,
	"nvmlGpuInstanceGetComputeInstanceProfileInfoV": true,
	"nvmlDeviceGetGpuFabricInfoV":                   true,
	"nvmlDeviceGetTemperatureV":                     true,
	"nvmlDeviceGetC2cModeInfoV":                     true,
	"nvmlDeviceGetNvLinkInfo":                       true,
	"nvmlGpmQueryDeviceSupport":                     true,
	"nvmlGpmMetricsGet":                             true,
}

func lookupSymbol(symbol string) error {
	if handlerSymbols[symbol] {
		return fmt.Errorf("sim: symbol %s is not available in the simulator", symbol)
	}
	return nil
}
