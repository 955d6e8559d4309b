package push

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
)

// JetStream names and defaults of the outbox.
const (
	// OutboxStream is the work-queue stream of pending notifications.
	OutboxStream = "CHIO_A2A_PUSH_OUTBOX"
	// OutboxSubjects is its subject filter: one subject per task,
	// chio.a2a.push.outbox.<base64url task id>.
	OutboxSubjects      = outboxSubjectPrefix + "*"
	outboxSubjectPrefix = "chio.a2a.push.outbox."
	// DefaultDurable is the durable consumer every replica shares.
	DefaultDurable = "chio-a2a-push"

	DefaultReplicas        = 1
	DefaultBackoffBase     = time.Second
	DefaultBackoffCap      = time.Minute
	DefaultMaxDeliver      = 8
	DefaultTimeout         = 10 * time.Second
	DefaultConcurrency     = 16
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxMessageBytes caps one outbox message (headers and
	// payload), and never more than the connection's max payload.
	DefaultMaxMessageBytes = 4 << 20

	// ContentType is the Content-Type of every notification (A2A 1.0).
	ContentType = "application/a2a+json"
	// TokenHeader carries Config.Token.
	TokenHeader = "X-A2A-Notification-Token"
	// IDHeader carries the notification's idempotency key (the edge's
	// "<task commit seq>/<event index>"), the same on every attempt.
	IDHeader = "Chio-Notification-Id"

	// envelopeHeader carries the delivery fields of an outbox message as
	// JSON; the message body is the payload, byte for byte.
	envelopeHeader  = "Chio-Push"
	envelopeVersion = 1
	// ackWaitMargin is what AckWait adds to the per-attempt timeout.
	ackWaitMargin = 30 * time.Second
	// maxResponseDrain is how much of a response body is read (to reuse
	// the connection) before it is closed.
	maxResponseDrain = 64 << 10
)

// OutboxStreamConfig is the configuration of OutboxStream, created or
// updated by OpenOutbox: file storage, work-queue retention (a message is
// removed once acknowledged or terminated), and a dedup window in which a
// second Enqueue of the same notification is dropped by JetStream.
func OutboxStreamConfig(replicas int, maxMessageBytes int32, duplicates time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        OutboxStream,
		Description: "Chio A2A push notifications waiting for delivery",
		Subjects:    []string{OutboxSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.WorkQueuePolicy,
		Replicas:    max(replicas, 1),
		Duplicates:  duplicates,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  maxMessageBytes,
	}
}

// OutboxConsumerConfig is the configuration of the durable pull consumer
// every replica's Run shares. AckWait exceeds the per-attempt timeout (a
// worker also marks a message in progress when it starts on it).
// MaxDeliver is unlimited on the server: Run counts attempts itself and
// terminates a message after its last one, so that a message is never
// left in the work queue after the server stops redelivering it.
func OutboxConsumerConfig(durable string, timeout time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "Chio A2A push delivery, shared by every edge replica",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       timeout + ackWaitMargin,
		MaxDeliver:    -1,
		MaxAckPending: 1024,
	}
}

// OutboxOption configures an Outbox. As everywhere in the project, an
// option only records its value; OpenOutbox checks them all and refuses an
// invalid one with an ErrInvalidArgument naming it.
type OutboxOption func(*outboxOptions)

type outboxOptions struct {
	replicas    int
	backoffBase time.Duration
	backoffCap  time.Duration
	maxDeliver  int
	timeout     time.Duration
	concurrency int
	durable     string
	duplicates  time.Duration
	maxMsgBytes int
	log         *slog.Logger
}

// WithOutboxReplicas sets the outbox stream's replica count (default 1).
func WithOutboxReplicas(n int) OutboxOption { return func(o *outboxOptions) { o.replicas = n } }

// WithOutboxLogger sets the Outbox's logger (default slog.Default()).
func WithOutboxLogger(l *slog.Logger) OutboxOption { return func(o *outboxOptions) { o.log = l } }

// WithBackoff sets the retry delay: attempt n waits about base·2^(n-1),
// at most cap, with jitter (defaults DefaultBackoffBase, DefaultBackoffCap).
func WithBackoff(base, limit time.Duration) OutboxOption {
	return func(o *outboxOptions) { o.backoffBase, o.backoffCap = base, limit }
}

// WithMaxDeliver sets how many delivery attempts a notification gets
// (default DefaultMaxDeliver).
func WithMaxDeliver(n int) OutboxOption { return func(o *outboxOptions) { o.maxDeliver = n } }

// WithTimeout sets the per-attempt timeout, connection included (default
// DefaultTimeout).
func WithTimeout(d time.Duration) OutboxOption { return func(o *outboxOptions) { o.timeout = d } }

// WithConcurrency sets how many deliveries one Run makes at once (default
// DefaultConcurrency).
func WithConcurrency(n int) OutboxOption { return func(o *outboxOptions) { o.concurrency = n } }

// WithDurable sets the durable consumer's name (default DefaultDurable).
// Every replica must use the same one: a work-queue stream refuses a
// second consumer over the same subjects.
func WithDurable(name string) OutboxOption { return func(o *outboxOptions) { o.durable = name } }

// WithDuplicateWindow sets the stream's dedup window (default
// DefaultDuplicateWindow): a notification enqueued again within it is
// dropped.
func WithDuplicateWindow(d time.Duration) OutboxOption {
	return func(o *outboxOptions) { o.duplicates = d }
}

// WithMaxMessageBytes caps one outbox message, payload and delivery
// fields (default DefaultMaxMessageBytes; never more than the
// connection's max payload).
func WithMaxMessageBytes(n int) OutboxOption { return func(o *outboxOptions) { o.maxMsgBytes = n } }

// check refuses an invalid option, naming it.
func (o *outboxOptions) check() error {
	switch {
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("%w: WithOutboxReplicas: replicas %d not in 1..5", ErrInvalidArgument, o.replicas)
	case o.log == nil:
		return fmt.Errorf("%w: WithOutboxLogger: nil logger", ErrInvalidArgument)
	case o.backoffBase < time.Millisecond || o.backoffCap < o.backoffBase:
		return fmt.Errorf("%w: WithBackoff: backoff base %s, cap %s", ErrInvalidArgument, o.backoffBase, o.backoffCap)
	case o.maxDeliver < 1 || o.maxDeliver > 100:
		return fmt.Errorf("%w: WithMaxDeliver: max deliver %d not in 1..100", ErrInvalidArgument, o.maxDeliver)
	case o.timeout < 10*time.Millisecond || o.timeout > 5*time.Minute:
		return fmt.Errorf("%w: WithTimeout: timeout %s not in 10ms..5m", ErrInvalidArgument, o.timeout)
	case o.concurrency < 1 || o.concurrency > 1024:
		return fmt.Errorf("%w: WithConcurrency: concurrency %d not in 1..1024", ErrInvalidArgument, o.concurrency)
	case o.duplicates < time.Second:
		return fmt.Errorf("%w: WithDuplicateWindow: duplicate window %s below 1s", ErrInvalidArgument, o.duplicates)
	case o.maxMsgBytes < 16<<10 || o.maxMsgBytes > 64<<20:
		return fmt.Errorf("%w: WithMaxMessageBytes: max message bytes %d not in 16KiB..64MiB", ErrInvalidArgument, o.maxMsgBytes)
	}
	return checkDurable(o.durable)
}

// checkDurable refuses a durable name JetStream would not take.
func checkDurable(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: WithDurable: durable name empty or longer than 64 bytes", ErrInvalidArgument)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == '.' || c == '*' || c == '>' || c == '/' || c == '\\' || c >= 0x7f {
			return fmt.Errorf("%w: WithDurable: durable name %q", ErrInvalidArgument, name)
		}
	}
	return nil
}

// Outbox delivers push notifications at least once, each from exactly one
// replica at a time: Enqueue writes a notification to the work-queue
// stream OutboxStream, and Run, which every replica runs with the same
// durable consumer, POSTs it to the webhook.
//
// A notification carries the delivery fields of its config (URL, token,
// authentication), so its delivery does not depend on the config still
// existing. At every attempt, Run also reads the config in the config
// bucket (one message get from the bucket's stream leader; a second one,
// for the task's closed mark, when the config is gone): a live config is
// delivered to with its current fields (a replaced config's new URL or
// credentials); a config gone with its task (Store.CloseTask or
// DeleteTask, within the closed task TTL) is delivered to with the fields the notification
// carries; a config gone otherwise (its owner deleted it, or it was never
// stored) is not delivered to.
//
// Outcomes of an attempt: a 2xx acknowledges the notification. A 4xx
// other than 408 (timeout), 425 (too early) and 429 (too many requests)
// terminates it at once: the receiver refused this request and an
// identical one will be refused again. A URL the policy refuses as
// written terminates it at once too (it cannot change). Everything else,
// a network error, a timeout, a 3xx (redirects are not followed), a 5xx,
// 408, 425, 429, or a connection to an address the policy refuses (DNS
// may change), is retried after an exponential backoff with jitter
// (honouring a Retry-After in seconds up to the backoff cap), until the
// last of MaxDeliver attempts, after which it is terminated and logged.
// Notifications are not ordered: retries and concurrent workers reorder
// them.
type Outbox struct {
	stream  jetstream.Stream
	configs configReader
	js      jetstream.JetStream
	policy  Policy
	client  *http.Client
	opts    outboxOptions
}

// OpenOutbox creates or updates the outbox stream and returns an Outbox
// delivering under policy. The config bucket must exist (OpenStore first):
// delivery reads it.
func OpenOutbox(ctx context.Context, js jetstream.JetStream, policy Policy, opts ...OutboxOption) (*Outbox, error) {
	o := outboxOptions{
		replicas:    DefaultReplicas,
		backoffBase: DefaultBackoffBase,
		backoffCap:  DefaultBackoffCap,
		maxDeliver:  DefaultMaxDeliver,
		timeout:     DefaultTimeout,
		concurrency: DefaultConcurrency,
		durable:     DefaultDurable,
		duplicates:  DefaultDuplicateWindow,
		maxMsgBytes: DefaultMaxMessageBytes,
		log:         slog.Default(),
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		opt(&o)
	}
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("open push outbox: %w", err)
	}
	if js == nil {
		return nil, fmt.Errorf("open push outbox: %w: nil JetStream", ErrInvalidArgument)
	}
	if mp := int(js.Conn().MaxPayload()); mp > 0 && mp < o.maxMsgBytes {
		o.maxMsgBytes = mp
	}
	stream, err := js.CreateOrUpdateStream(ctx, OutboxStreamConfig(o.replicas, int32(o.maxMsgBytes), o.duplicates))
	if err != nil {
		return nil, fmt.Errorf("open push outbox: create stream %s: %w", OutboxStream, err)
	}
	if _, err := js.Stream(ctx, bucketStream); err != nil {
		return nil, fmt.Errorf("open push outbox: config bucket %s (open the Store first): %w", Bucket, err)
	}
	configs := newConfigReader(js)
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would connect where the policy cannot see
		DialContext:           policy.dialer(o.timeout),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   o.timeout,
		ExpectContinueTimeout: time.Second,
	}
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a 3xx is a failed delivery
		},
	}
	return &Outbox{stream: stream, configs: configs, js: js, policy: policy, client: client, opts: o}, nil
}

// envelope is the delivery fields of an outbox message, in its
// envelopeHeader; the body is the payload.
type envelope struct {
	V               int       `json:"v"`
	TaskID          string    `json:"task_id"`
	ConfigID        string    `json:"config_id"`
	ConfigKey       string    `json:"config_key"`
	Key             string    `json:"key"`
	URL             string    `json:"url"`
	Token           string    `json:"token,omitempty"`
	AuthScheme      string    `json:"auth_scheme,omitempty"`
	AuthCredentials string    `json:"auth_credentials,omitempty"`
	Version         string    `json:"version,omitempty"`
	Enqueued        time.Time `json:"enqueued"`
}

// MaxKeyBytes bounds Enqueue's idempotency key.
const MaxKeyBytes = 256

// Enqueue stores one notification of cfg durably in the outbox: payload
// (one A2A StreamResponse, or whatever the edge's dialect for cfg.Version
// sends) is POSTed to cfg.URL as is. key is a caller-chosen idempotency
// key, such as "<task commit seq>/<event index>": with the config's task,
// owner and id it makes the message's Nats-Msg-Id, so an Enqueue repeated
// within the dedup window (after a crash, or by two replicas) is dropped
// by JetStream and delivered once. After the window a repeat is delivered
// again: delivery is at least once.
func (o *Outbox) Enqueue(ctx context.Context, cfg Config, key string, payload []byte) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("enqueue push notification: %w", err)
	}
	if key == "" || len(key) > MaxKeyBytes {
		return fmt.Errorf("enqueue push notification: %w: key empty or longer than %d bytes", ErrInvalidArgument, MaxKeyBytes)
	}
	if len(payload) == 0 {
		return fmt.Errorf("enqueue push notification: %w: empty payload", ErrInvalidArgument)
	}
	ck := configKey(cfg.Owner, cfg.TaskID, cfg.ID)
	env, err := json.Marshal(envelope{
		V: envelopeVersion, TaskID: cfg.TaskID, ConfigID: cfg.ID, ConfigKey: ck, Key: key,
		URL: cfg.URL, Token: cfg.Token, AuthScheme: cfg.AuthScheme, AuthCredentials: cfg.AuthCredentials,
		Version: cfg.Version, Enqueued: time.Now().UTC(),
	})
	if err != nil {
		return fmt.Errorf("enqueue push notification: encode: %w", err)
	}
	// The key is free text: hash it, with the config key (which has no
	// newline), into a fixed-size message id.
	sum := sha256.Sum256([]byte(ck + "\n" + key))
	msgID := base64.RawURLEncoding.EncodeToString(sum[:])
	m := nats.NewMsg(outboxSubjectPrefix + encodeID(cfg.TaskID))
	m.Header.Set(envelopeHeader, string(env))
	m.Data = payload
	// Headers, their framing and the dedup header the publish adds.
	if size := len(payload) + len(env) + len(envelopeHeader) + len(msgID) + 64; size > o.opts.maxMsgBytes {
		return fmt.Errorf("enqueue push notification: %w: %d bytes, limit %d", ErrTooLarge, size, o.opts.maxMsgBytes)
	}
	if _, err := o.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(OutboxStream)); err != nil {
		return fmt.Errorf("enqueue push notification: publish: %w", err)
	}
	return nil
}

// Run delivers notifications until ctx ends, with a durable pull
// consumer that every replica shares (each message goes to one of them
// at a time) and up to the configured concurrency of deliveries at once.
// It returns nil when ctx ends, and an error when the consumer cannot be
// created or is deleted under it. Deliveries in flight when ctx ends are
// abandoned and negatively acknowledged, to be retried at once by another
// replica.
func (o *Outbox) Run(ctx context.Context) error {
	cons, err := o.stream.CreateOrUpdateConsumer(ctx, OutboxConsumerConfig(o.opts.durable, o.opts.timeout))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("push outbox: create consumer %s: %w", o.opts.durable, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(o.opts.concurrency))
	if err != nil {
		return fmt.Errorf("push outbox: consume: %w", err)
	}
	sem := make(chan struct{}, o.opts.concurrency)
	var wg sync.WaitGroup
	defer func() {
		it.Stop()
		wg.Wait()
		o.client.CloseIdleConnections()
	}()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			<-sem
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return fmt.Errorf("push outbox: consumer %s: %w", o.opts.durable, err)
			}
			o.opts.log.Warn("push: outbox consumer", "err", err)
			select { // do not spin on a persistent error
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			o.deliver(ctx, msg)
		})
	}
}

// deliver makes one delivery attempt of msg and settles it.
func (o *Outbox) deliver(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		o.opts.log.Error("push: outbox message without metadata; dropping", "err", err)
		o.term(msg, "no metadata")
		return
	}
	attempt := int(meta.NumDelivered)
	var env envelope
	if err := json.Unmarshal([]byte(msg.Headers().Get(envelopeHeader)), &env); err != nil || env.V != envelopeVersion {
		o.opts.log.Error("push: malformed outbox message; dropping", "seq", meta.Sequence.Stream, "err", err)
		o.term(msg, "malformed")
		return
	}
	log := o.opts.log.With("task", env.TaskID, "config", env.ConfigID, "key", env.Key)
	if attempt > o.opts.maxDeliver {
		// Delivered without a settled attempt (a replica stopped or
		// crashed mid-attempt) until the budget ran out.
		log.Warn("push: notification not delivered; giving up", "attempts", attempt-1, "err", "attempts exhausted")
		o.term(msg, "attempts exhausted")
		return
	}
	_ = msg.InProgress() // restart AckWait: the message may have waited in the client's buffer

	dest := env
	cfg, state, err := o.configs.lookup(ctx, env.ConfigKey, env.TaskID)
	switch {
	case err != nil:
		o.retry(ctx, msg, log, attempt, 0, err)
		return
	case state == configDeleted:
		log.Debug("push: config deleted; notification dropped")
		o.term(msg, "config deleted")
		return
	case state == configLive:
		dest.URL, dest.Token = cfg.URL, cfg.Token
		dest.AuthScheme, dest.AuthCredentials = cfg.AuthScheme, cfg.AuthCredentials
	}
	t, err := o.policy.checkStatic(dest.URL)
	if err != nil {
		log.Warn("push: webhook URL refused by the policy; notification dropped", "err", err)
		o.term(msg, "URL refused")
		return
	}
	log = log.With("host", t.u.Host)

	status, retryAfter, err := o.post(ctx, dest, msg.Data())
	switch {
	case err == nil && status >= 200 && status < 300:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := msg.DoubleAck(actx); err != nil {
			log.Warn("push: ack after delivery failed; the notification may be delivered again", "err", err)
		}
		log.Debug("push: delivered", "attempt", attempt, "status", status)
	case err == nil && permanent(status):
		log.Warn("push: webhook refused the notification; giving up", "attempt", attempt, "status", status)
		o.term(msg, "HTTP "+strconv.Itoa(status))
	case err == nil:
		o.retry(ctx, msg, log, attempt, retryAfter, fmt.Errorf("HTTP status %d", status))
	default:
		o.retry(ctx, msg, log, attempt, 0, err)
	}
}

// permanent reports whether a non-2xx status ends delivery at once.
func permanent(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// post makes one POST of payload to t.URL and returns the status and any
// Retry-After delay.
func (o *Outbox) post(ctx context.Context, t envelope, payload []byte) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, o.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(payload))
	if err != nil {
		return 0, 0, fmt.Errorf("build request: %w", redact(err))
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("User-Agent", "chio-a2a-push/1")
	if t.AuthScheme != "" {
		v := t.AuthScheme
		if t.AuthCredentials != "" {
			v += " " + t.AuthCredentials
		}
		req.Header.Set("Authorization", v)
	}
	if t.Token != "" {
		req.Header.Set(TokenHeader, t.Token)
	}
	// The same id on every attempt: a receiver can drop redeliveries, and
	// order a task's notifications by it (deliveries may overtake each
	// other).
	req.Header.Set(IDHeader, t.Key)
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("post: %w", redact(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseDrain))
	_ = resp.Body.Close()
	var after time.Duration
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			after = time.Duration(min(n, 3600)) * time.Second
		}
	}
	return resp.StatusCode, after, nil
}

// redact drops the URL (which may carry secrets in its query) from an
// HTTP client error.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// retry schedules another attempt of msg after a backoff, or terminates
// it after its last attempt.
func (o *Outbox) retry(ctx context.Context, msg jetstream.Msg, log *slog.Logger, attempt int, retryAfter time.Duration, cause error) {
	if ctx.Err() != nil {
		// Shutting down mid-attempt: let another replica retry now.
		_ = msg.Nak()
		return
	}
	if attempt >= o.opts.maxDeliver {
		log.Warn("push: notification not delivered; giving up", "attempts", attempt, "err", cause)
		o.term(msg, "attempts exhausted")
		return
	}
	delay := max(o.backoff(attempt), min(retryAfter, o.opts.backoffCap))
	log.Debug("push: delivery failed; will retry", "attempt", attempt, "delay", delay, "err", cause)
	if err := msg.NakWithDelay(delay); err != nil && ctx.Err() == nil {
		log.Warn("push: nak failed; the notification is retried after the ack wait", "err", err)
	}
}

// backoff is the delay after attempt n (1-based): base·2^(n-1) capped at
// the backoff cap, with "equal jitter" (half fixed, half random).
func (o *Outbox) backoff(attempt int) time.Duration {
	return backoff.Policy{Base: o.opts.backoffBase, Cap: o.opts.backoffCap}.Delay(attempt)
}

func (o *Outbox) term(msg jetstream.Msg, reason string) {
	if err := msg.TermWithReason(reason); err != nil {
		o.opts.log.Warn("push: terminate outbox message", "reason", reason, "err", err)
	}
}
