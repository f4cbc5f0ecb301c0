package sim

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The generated go-nvml mocks panic when a method's ...Func field is nil.
// fillUnimplemented gives every such field a stub returning zero values and
// ERROR_NOT_SUPPORTED, so a caller can never reach a panic.

var (
	returnType = reflect.TypeOf(nvml.Return(0))
	stubs      sync.Map // reflect.Type (func type) -> reflect.Value (stub)
)

// zeroResults returns the results of a call of func type t: zero values, and
// ret for every nvml.Return.
func zeroResults(t reflect.Type, ret nvml.Return) []reflect.Value {
	out := make([]reflect.Value, t.NumOut())
	for i := range out {
		if t.Out(i) == returnType {
			out[i] = reflect.ValueOf(ret)
		} else {
			out[i] = reflect.Zero(t.Out(i))
		}
	}
	return out
}

func notSupportedStub(t reflect.Type) reflect.Value {
	if v, ok := stubs.Load(t); ok {
		return v.(reflect.Value)
	}
	v := reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
		return zeroResults(t, nvml.ERROR_NOT_SUPPORTED)
	})
	stubs.Store(t, v)
	return v
}

// fillUnimplemented sets every nil exported func field of the struct that
// mockPtr points to (a mock.Device, mock.Interface, ...) to a stub returning
// ERROR_NOT_SUPPORTED.
func fillUnimplemented(mockPtr any) {
	v := reflect.ValueOf(mockPtr).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() == reflect.Func && f.CanSet() && f.IsNil() {
			f.Set(notSupportedStub(f.Type()))
		}
	}
}

// handleTypes are the handle interfaces whose methods nvml.Interface also
// exposes as functions: Interface.DeviceGetName(dev) is dev.GetName().
var handleTypes = map[string]reflect.Type{
	"Device":          reflect.TypeOf((*nvml.Device)(nil)).Elem(),
	"GpuInstance":     reflect.TypeOf((*nvml.GpuInstance)(nil)).Elem(),
	"ComputeInstance": reflect.TypeOf((*nvml.ComputeInstance)(nil)).Elem(),
	"EventSet":        reflect.TypeOf((*nvml.EventSet)(nil)).Elem(),
}

// forwardHandleCalls sets every nil XxxYyyFunc field of an nvml.Interface mock
// whose first parameter is an Xxx handle to a function calling the handle's
// Yyy method (ERROR_INVALID_ARGUMENT for a nil handle), as the real library
// does.
func forwardHandleCalls(lib any) {
	v := reflect.ValueOf(lib).Elem()
	t := v.Type()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), t.Field(i)
		if f.Kind() != reflect.Func || !f.CanSet() || !f.IsNil() || f.Type().NumIn() == 0 {
			continue
		}
		name := strings.TrimSuffix(sf.Name, "Func")
		for prefix, ht := range handleTypes {
			if f.Type().In(0) != ht || !strings.HasPrefix(name, prefix) {
				continue
			}
			m, ok := ht.MethodByName(strings.TrimPrefix(name, prefix))
			if !ok || !sameSignature(m.Type, f.Type()) {
				continue
			}
			f.Set(forwarder(f.Type(), m.Name))
		}
	}
}

// sameSignature reports whether method type mt (no receiver) equals func
// type ft without its first (handle) parameter.
func sameSignature(mt, ft reflect.Type) bool {
	if mt.NumIn() != ft.NumIn()-1 || mt.NumOut() != ft.NumOut() || mt.IsVariadic() != ft.IsVariadic() {
		return false
	}
	for i := 0; i < mt.NumIn(); i++ {
		if mt.In(i) != ft.In(i+1) {
			return false
		}
	}
	for i := 0; i < mt.NumOut(); i++ {
		if mt.Out(i) != ft.Out(i) {
			return false
		}
	}
	return true
}

func forwarder(ft reflect.Type, method string) reflect.Value {
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		h := args[0]
		if h.IsNil() || (h.Elem().Kind() == reflect.Pointer && h.Elem().IsNil()) {
			return zeroResults(ft, nvml.ERROR_INVALID_ARGUMENT)
		}
		m := h.MethodByName(method)
		if ft.IsVariadic() {
			return m.CallSlice(args[1:])
		}
		return m.Call(args[1:])
	})
}

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
