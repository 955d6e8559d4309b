package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2aadapter"
	"github.com/chio-ledger/chio/edges/acp"
)

// taskLimits are the per-principal bounds on the state an edge keeps for
// its callers: live tasks (A2A and ACP) and push configs. Each is counted
// from the shared stream or bucket, so it holds across replicas.
type taskLimits struct {
	liveTasks   int
	pushConfigs int
	// retention is how long an ended A2A task stays in CHIO_TASKS after
	// its last commit (--task-retention; 0 keeps every task).
	retention time.Duration
}

// registerTaskLimitFlags adds --max-live-tasks and --max-push-configs.
func registerTaskLimitFlags(f *pflag.FlagSet, l *taskLimits) {
	f.IntVar(&l.liveTasks, "max-live-tasks", taskstore.DefaultMaxLiveTasksPerOwner, "tasks one principal may hold unfinished at once, over every replica (A2A, ACP, and with --a2a-target the partners' tasks); one more is refused with the count and limit")
	f.IntVar(&l.pushConfigs, "max-push-configs", push.DefaultMaxConfigsPerOwner, "push-notification configs one principal may hold over all its tasks; one more is refused with the count and limit")
}

// registerTaskRetention adds --task-retention, on the commands that serve
// A2A tasks (CHIO_TASKS).
func registerTaskRetention(f *pflag.FlagSet, l *taskLimits) {
	f.DurationVar(&l.retention, "task-retention", taskstore.DefaultRetention, "how long an A2A task that has ended stays readable (tasks/get) after its last change; then it is purged from CHIO_TASKS, once the projections (and push delivery) have read it: nothing is purged while they do not run; live tasks are never purged; 0 keeps every task")
}

func (l taskLimits) taskstore() taskstore.Option {
	return taskstore.WithMaxLiveTasksPerOwner(l.liveTasks)
}

func (l taskLimits) push() push.StoreOption { return push.WithMaxConfigsPerOwner(l.pushConfigs) }

func (l taskLimits) acp() acp.Option { return acp.WithMaxLiveTasks(l.liveTasks) }

func (l taskLimits) a2aAdapter() a2aadapter.RegistryOption {
	return a2aadapter.WithMaxLiveTasks(l.liveTasks)
}
