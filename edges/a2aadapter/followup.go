package a2aadapter

import (
	"context"
	"encoding/json"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
)

// unary runs a call that answers once: a blocking send, or a follow-up
// other than subscribe_task.
func (a *Adapter) unary(ctx context.Context, inv tools.Invocation, sk *skill, ar *args) (json.RawMessage, error) {
	tenant := a.iface.Tenant
	switch ar.mode {
	case modeSend:
		return a.send(ctx, inv, sk, ar)
	case ModeGetTask:
		id := a2a.TaskID(ar.GetTask.ID)
		t, err := a.client.GetTask(ctx, &a2a.GetTaskRequest{Tenant: tenant, ID: id, HistoryLength: ar.GetTask.HistoryLength})
		if err != nil {
			return nil, a.fail(ctx, sk, "GetTask", err)
		}
		return a.taskResult(ctx, sk, "GetTask", t, id, SourceGetTask)
	case ModeCancelTask:
		id := a2a.TaskID(ar.CancelTask.ID)
		t, err := a.client.CancelTask(ctx, &a2a.CancelTaskRequest{Tenant: tenant, ID: id, Metadata: ar.CancelTask.Metadata})
		if err != nil {
			return nil, a.fail(ctx, sk, "CancelTask", err)
		}
		return a.taskResult(ctx, sk, "CancelTask", t, id, SourceCancelTask)
	case ModeCreatePushConfig:
		const op = "CreateTaskPushNotificationConfig"
		c := ar.CreatePushConfig
		req := &a2a.PushConfig{Tenant: tenant, TaskID: a2a.TaskID(c.TaskID), ID: c.ID, URL: c.URL, Token: c.Token}
		if c.Authentication != nil {
			req.Auth = &a2a.PushAuthInfo{Scheme: c.Authentication.Scheme, Credentials: c.Authentication.Credentials}
		}
		res, err := a.client.CreateTaskPushConfig(ctx, req)
		if err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		return a.pushResult(ctx, sk, op, res, req.TaskID)
	case ModeGetPushConfig:
		const op = "GetTaskPushNotificationConfig"
		r := ar.GetPushConfig
		res, err := a.client.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{Tenant: tenant, TaskID: a2a.TaskID(r.TaskID), ID: r.ID})
		if err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		return a.pushResult(ctx, sk, op, res, a2a.TaskID(r.TaskID))
	case ModeListPushConfigs:
		const op = "ListTaskPushNotificationConfigs"
		l := ar.ListPushConfigs
		taskID := a2a.TaskID(l.TaskID)
		res, err := a.client.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{Tenant: tenant, TaskID: taskID, PageSize: l.PageSize, PageToken: l.PageToken})
		if err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		configs := make([]*a2a.PushConfig, 0, len(res))
		for _, c := range res {
			if err := checkPushConfig(c, taskID); err != nil {
				return nil, a.fail(ctx, sk, op, err)
			}
			configs = append(configs, c)
		}
		return marshalResult(map[string]any{"pushConfigs": configs})
	default: // ModeDeletePushConfig
		const op = "DeleteTaskPushNotificationConfig"
		r := ar.DeletePushConfig
		if err := a.client.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{Tenant: tenant, TaskID: a2a.TaskID(r.TaskID), ID: r.ID}); err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		return marshalResult(map[string]any{"deleted": map[string]string{"taskId": r.TaskID, "id": r.ID}})
	}
}

func (a *Adapter) pushResult(ctx context.Context, sk *skill, op string, c *a2a.PushConfig, taskID a2a.TaskID) (json.RawMessage, error) {
	if err := checkPushConfig(c, taskID); err != nil {
		return nil, a.fail(ctx, sk, op, err)
	}
	return marshalResult(map[string]any{"pushConfig": c})
}
