package sim_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu/sim"
)

// TestOpenRefusesBadState checks that a state file this package cannot
// trust is refused with an error naming the file, the field and the value,
// instead of being used: a version it does not know, two GPUs of one UUID,
// two MIG devices of one UUID.
func TestOpenRefusesBadState(t *testing.T) {
	tests := []struct {
		name   string
		damage func(st map[string]any)
		want   []string // in the error, besides the file
	}{
		{"unknown version", func(st map[string]any) { st["version"] = 99 }, []string{"version: 99", "version 1"}},
		{"no version", func(st map[string]any) { delete(st, "version") }, []string{"version: 0"}},
		{"duplicate GPU UUID", func(st map[string]any) {
			gpus := st["gpus"].([]any)
			gpus[3].(map[string]any)["uuid"] = gpus[1].(map[string]any)["uuid"]
		}, []string{"gpus[3].uuid", "gpus[1].uuid has that UUID too"}},
		{"duplicate MIG device UUID", func(st map[string]any) {
			gpus := st["gpus"].([]any)
			ci := func(uuid string) map[string]any {
				return map[string]any{"id": 0, "profileId": 0, "start": 0, "size": 1, "uuid": uuid}
			}
			gpus[2].(map[string]any)["migCurrent"] = 1
			gpus[2].(map[string]any)["gpuInstances"] = []any{
				map[string]any{"id": 1, "profileId": 19, "start": 0, "size": 1, "serial": 1, "computeInstances": []any{ci("MIG-same")}},
				map[string]any{"id": 2, "profileId": 19, "start": 1, "size": 1, "serial": 2, "computeInstances": []any{ci("MIG-same")}},
			}
		}, []string{"gpus[2].gpuInstances[1].computeInstances[0].uuid", `"MIG-same"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := sim.Open("dgxh200", dir); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "sim", "dgxh200", "state.json")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var st map[string]any
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatal(err)
			}
			tc.damage(st)
			if tc.name == "duplicate GPU UUID" {
				tc.want = append(tc.want, st["gpus"].([]any)[1].(map[string]any)["uuid"].(string))
			}
			raw, _ = json.Marshal(st)
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = sim.Open("dgxh200", dir)
			if err == nil {
				t.Fatal("Open accepted the damaged state")
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
