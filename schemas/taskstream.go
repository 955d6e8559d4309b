package schemas

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TasksStreamConfig is the configuration of TasksStream, the one both the
// A2A edge's task store (create or update) and the projections (create
// when missing) give it, so that whichever starts first brings up the
// same stream and an update never flips a setting back and forth.
//
// Task events are kept until the stream is purged (a task's fold needs
// all of them, so there is no age limit that would cut a task in half);
// DiscardNew refuses writes rather than drop history when a limit set by
// an operator is reached. AllowDirect serves reads from any replica with
// one batched direct get. AllowAtomicPublish lets the task store group
// concurrent commits into one atomic batch on a single replica, where each
// message otherwise costs an fsync of its own; a replicated stream already
// groups proposals into one log write, so it is left off there.
func TasksStreamConfig(replicas int, maxMsgSize int32, duplicates time.Duration) jetstream.StreamConfig {
	replicas = max(replicas, 1)
	return jetstream.StreamConfig{
		Name:               TasksStream,
		Description:        "Chio A2A task events, one subject per task",
		Subjects:           []string{TasksSubjects},
		Storage:            jetstream.FileStorage,
		Retention:          jetstream.LimitsPolicy,
		Replicas:           replicas,
		Duplicates:         duplicates,
		Discard:            jetstream.DiscardNew,
		MaxMsgSize:         maxMsgSize,
		AllowDirect:        true,
		AllowAtomicPublish: replicas == 1,
		Compression:        StreamCompression,
	}
}
