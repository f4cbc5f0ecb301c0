package sim

// zz_generated.funcs.go holds the func-field implementations of the nvml
// interfaces (funcInterface, funcDevice, ...) that the simulator's handles
// embed. Regenerate it after upgrading go-nvml.
//go:generate go run ./internal/genfuncs -o zz_generated.funcs.go
