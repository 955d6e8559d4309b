package main

import (
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
}

// registerTaskLimitFlags adds --max-live-tasks and --max-push-configs.
func registerTaskLimitFlags(f *pflag.FlagSet, l *taskLimits) {
	f.IntVar(&l.liveTasks, "max-live-tasks", taskstore.DefaultMaxLiveTasksPerOwner, "tasks one principal may hold unfinished at once, over every replica (A2A, ACP, and with --a2a-target the partners' tasks); one more is refused with the count and limit")
	f.IntVar(&l.pushConfigs, "max-push-configs", push.DefaultMaxConfigsPerOwner, "push-notification configs one principal may hold over all its tasks; one more is refused with the count and limit")
}

func (l taskLimits) taskstore() taskstore.Option {
	return taskstore.WithMaxLiveTasksPerOwner(l.liveTasks)
}

func (l taskLimits) push() push.StoreOption { return push.WithMaxConfigsPerOwner(l.pushConfigs) }

func (l taskLimits) acp() acp.Option { return acp.WithMaxLiveTasks(l.liveTasks) }

func (l taskLimits) a2aAdapter() a2aadapter.RegistryOption {
	return a2aadapter.WithMaxLiveTasks(l.liveTasks)
}
