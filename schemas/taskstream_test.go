package schemas

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The task stream's configuration is what the edge and the projections
// gave it before it moved here, plus atomic batches on one replica only.
func TestTasksStreamConfig(t *testing.T) {
	for _, tt := range []struct {
		replicas, want int
		atomic         bool
	}{
		{0, 1, true},
		{1, 1, true},
		{3, 3, false},
	} {
		want := jetstream.StreamConfig{
			Name:               "CHIO_TASKS",
			Description:        "Chio A2A task events, one subject per task",
			Subjects:           []string{"chio.tasks.*"},
			Storage:            jetstream.FileStorage,
			Retention:          jetstream.LimitsPolicy,
			Replicas:           tt.want,
			Duplicates:         2 * time.Minute,
			Discard:            jetstream.DiscardNew,
			MaxMsgSize:         1 << 20,
			AllowDirect:        true,
			AllowAtomicPublish: tt.atomic,
			Compression:        jetstream.S2Compression,
		}
		if got := TasksStreamConfig(tt.replicas, 1<<20, 2*time.Minute); !reflect.DeepEqual(got, want) {
			t.Errorf("replicas %d: %+v, want %+v", tt.replicas, got, want)
		}
	}
}
