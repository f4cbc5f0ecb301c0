package main

import (
	"strings"
	"testing"
)

func TestGenStubs(t *testing.T) {
	c, err := genStubs([]string{"nvmlInit_v2", "nvmlErrorString", "nvmlDeviceGetPowerUsage"},
		[]string{"nvmlInit_v2", "nvmlErrorString"}, "answered.list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c, "NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(void)") ||
		!strings.Contains(c, `nvml_not_supported("nvmlDeviceGetPowerUsage", &once[0])`) {
		t.Errorf("no stub of nvmlDeviceGetPowerUsage:\n%s", c)
	}
	for _, answered := range []string{"nvmlInit_v2(void)", "nvmlErrorString(void)"} {
		if strings.Contains(c, answered) {
			t.Errorf("a stub of answered %s:\n%s", answered, c)
		}
	}
}

func TestGenStubsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name            string
		names, answered []string
		want            string
	}{
		{"an answered name the library lacks", []string{"nvmlErrorString"}, []string{"nvmlErrorString", "nvmlNope"}, "nvmlNope is not a function"},
		{"a non-NVML export", []string{"cuInit"}, nil, "cuInit is not an NVML function"},
		{"nvmlErrorString as a stub", []string{"nvmlErrorString"}, nil, "nvmlErrorString must be answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := genStubs(tc.names, tc.answered, "answered.list"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
