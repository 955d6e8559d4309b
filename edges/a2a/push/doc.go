// Package push gives the A2A edge push notifications (the webhooks a
// client registers for a task): a config store, a URL policy
// against SSRF, and an outbox that delivers each notification at least
// once from exactly one replica at a time. Like the task store, it keeps
// no state in memory: every replica of the edge serves every config and
// delivers every notification.
//
// # Configs
//
// Store keeps configs in the JetStream KV bucket CHIO_A2A_PUSH under
// <task>.<owner>.<config> (base64url ids, and a digest of the opaque owner
// key the edge chooses). Every read and write is scoped to the owner: a
// config of another owner is ErrNotFound, exactly like a missing one, and
// cannot be replaced by reusing its id. A task has at most
// DefaultMaxConfigsPerTask configs (all owners together), and an owner at
// most DefaultMaxConfigsPerOwner over all its tasks (ErrOwnerQuota), so a
// caller keeping many tasks open cannot grow the bucket without bound;
// both are counted from the bucket itself, so they hold across replicas.
// Delete is
// idempotent, and notifications still queued for a deleted config are
// dropped. CloseTask marks an ended task closed for a while and has its
// configs expire (DeleteTask drops them at once), so that a terminal
// task's last notifications, once enqueued, are still delivered after
// its configs are gone.
//
// Delivery asks, for every task commit, whether the task has a config
// (Store.MayHaveConfigs): almost none has, so on a single-replica bucket
// that is one direct get answering "none", and the commit is not even
// decoded. Why a request and not an index kept in memory from a watch of
// the bucket: such an index cannot tell, without a request of its own,
// whether it has seen a config stored just before the commit it is asked
// about, and a notification would be lost in that race.
//
// # URL policy
//
// Policy.CheckURL is called by the edge when a config is created: https
// only (http for loopback hosts, when the policy allows loopback), no
// userinfo, no numeric host tricks, and every address the host resolves
// to public unless in Policy.AllowPrivate. The Outbox applies the same
// policy at delivery, to the URL and to each address it connects to (in
// the dialer, after resolution), so DNS rebinding cannot reach an
// internal address; it follows no redirects and uses no proxy.
//
// # Delivery
//
// Outbox.Enqueue writes one message per (config, event) to the work-queue
// stream CHIO_A2A_PUSH_OUTBOX with a Nats-Msg-Id derived from the config
// and a caller-chosen idempotency key, so a repeated Enqueue within the
// dedup window is dropped by JetStream. Outbox.Run, on every replica,
// consumes it with one shared durable pull consumer, POSTs the payload
// with Content-Type application/a2a+json, "Authorization: <scheme>
// <credentials>" and X-A2A-Notification-Token, acknowledges on a 2xx, and
// otherwise retries with exponential backoff and jitter (NakWithDelay) up
// to a maximum number of attempts; see Outbox for which failures are
// permanent.
package push
