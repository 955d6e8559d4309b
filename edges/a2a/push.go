package a2a

import (
	"context"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

func (e *Edge) pushConfigOp(ctx context.Context, rc rpcCall, v wire.Version, op wire.Operation, params any) (any, *wire.Error) {
	return nil, wire.PushNotSupported()
}

func (e *Edge) inlinePushConfig(ctx context.Context, v wire.Version, owner taskstore.Owner, t *taskstore.Task, p *wire.SendParams) *wire.Error {
	return nil
}
