package ociruntime

import (
	"reflect"
	"testing"
)

func TestParseInvocation(t *testing.T) {
	tests := []struct {
		args []string
		want Invocation
	}{
		{
			[]string{"--root", "/run/containerd/runc/k8s.io", "--log", "/x/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/p", "c1"},
			Invocation{Subcommand: "create", Root: "/run/containerd/runc/k8s.io", Bundle: "/b", ID: "c1"},
		},
		{[]string{"--root=/r", "create", "-b", "/b2", "c2"}, Invocation{Subcommand: "create", Root: "/r", Bundle: "/b2", ID: "c2"}},
		{[]string{"create", "--bundle=/b3", "--console-socket", "/s", "c3"}, Invocation{Subcommand: "create", Bundle: "/b3", ID: "c3"}},
		{[]string{"create", "c4"}, Invocation{Subcommand: "create", Bundle: ".", ID: "c4"}},
		{[]string{"--debug", "start", "c1"}, Invocation{Subcommand: "start"}},
		{[]string{"--version"}, Invocation{}},
	}
	for _, tc := range tests {
		got := ParseInvocation(tc.args)
		got.Args = nil
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseInvocation(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}
