package push

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// configState is what delivery finds in the config bucket for the config
// of a queued notification.
type configState int

const (
	// configLive: the config is stored; deliver with its current fields.
	configLive configState = iota + 1
	// configClosed: the config is gone with its task (Store.DeleteTask);
	// deliver with the fields the notification carries.
	configClosed
	// configDeleted: the config is gone and its task is not closed: its
	// owner deleted it (or it was never stored). Drop the notification.
	configDeleted
)

// configReader reads the config bucket at delivery time. It asks the
// stream leader (a plain message get), not a direct get that a lagging
// follower of a replicated bucket may serve: a config created just before
// its first notification must not look deleted.
type configReader struct {
	nc      *nats.Conn
	subject string // the bucket stream's message-get API subject
	timeout time.Duration
}

func newConfigReader(js jetstream.JetStream) configReader {
	jo := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case jo.Domain != "":
		prefix = "$JS." + jo.Domain + ".API."
	case jo.APIPrefix != "":
		prefix = jo.APIPrefix
		if prefix[len(prefix)-1] != '.' {
			prefix += "."
		}
	}
	return configReader{nc: js.Conn(), subject: prefix + "STREAM.MSG.GET." + bucketStream, timeout: jo.DefaultTimeout}
}

// lookup reports the state of config key ck of task taskID, and the
// config when it is live.
func (r configReader) lookup(ctx context.Context, ck, taskID string) (Config, configState, error) {
	data, ok, err := r.last(ctx, ck)
	if err != nil {
		return Config{}, 0, fmt.Errorf("look up push config: %w", err)
	}
	if ok {
		c, err := decodeConfig(data)
		if err != nil || configKey(c.Owner, c.TaskID, c.ID) != ck {
			return Config{}, 0, fmt.Errorf("look up push config: unreadable config under %s", ck)
		}
		return c, configLive, nil
	}
	_, closed, err := r.last(ctx, encodeID(taskID))
	switch {
	case err != nil:
		return Config{}, 0, fmt.Errorf("look up push config: task mark: %w", err)
	case closed:
		return Config{}, configClosed, nil
	}
	return Config{}, configDeleted, nil
}

// last returns the value of key, and false when the key has none (no
// message, or a KV delete or purge marker, or a server marker).
func (r configReader) last(ctx context.Context, key string) ([]byte, bool, error) {
	if _, ok := ctx.Deadline(); !ok && r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{bucketSubjectPrefix + key})
	if err != nil {
		return nil, false, err
	}
	reply, err := r.nc.RequestWithContext(ctx, r.subject, req)
	if err != nil {
		return nil, false, fmt.Errorf("get %s: %w", key, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, false, fmt.Errorf("get %s: decode reply: %w", key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, false, nil
	case resp.Error != nil:
		return nil, false, fmt.Errorf("get %s: %w", key, resp.Error)
	case resp.Message == nil:
		return nil, false, fmt.Errorf("get %s: %w", key, jetstream.ErrInvalidJetStreamResponse)
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, false, fmt.Errorf("get %s: decode headers: %w", key, err)
		}
		if h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			return nil, false, nil
		}
	}
	return resp.Message.Data, true, nil
}
