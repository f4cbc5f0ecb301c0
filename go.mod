module github.com/gpumux/gpumux

go 1.26.0

replace github.com/NVIDIA/go-nvml => github.com/NVIDIA/go-nvml v0.13.3-1

require github.com/NVIDIA/go-nvlib v0.13.0 // indirect
