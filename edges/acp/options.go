package acp

import (
	"log/slog"
	"time"

	"github.com/chio-ledger/chio/edges/tools"
)

// options is what New is told.
type options struct {
	exposure          tools.Exposure
	devToken          string
	defaultCategory   tools.ACPCategory
	requirePermission bool
	log               *slog.Logger
	replicas          int
	taskTTL           time.Duration
	name, version     string
	origin            string
	writeTimeout      time.Duration
	maxTasks          int64
	maxLiveTasks      int
	taskLease         time.Duration
	instanceID        string
}

// Option configures an Edge.
type Option func(*options)

// WithExposure sets which tools the edge shows and runs. The default,
// tools.Exposure{Protocol: "acp"}, exposes only tools whose manifest
// metadata sets "acp.expose": true.
func WithExposure(e tools.Exposure) Option { return func(o *options) { o.exposure = e } }

// WithDevToken sets the capability used for callers that present none
// (the dev mode of `chio up`); without it such callers are refused.
func WithDevToken(tok string) Option { return func(o *options) { o.devToken = tok } }

// WithDefaultCategory sets the category of a tool whose name matches no
// keyword (the edge's default category; "tool" by default).
func WithDefaultCategory(c tools.ACPCategory) Option {
	return func(o *options) { o.defaultCategory = c }
}

// WithPermissionRequired marks every capability requiresPermission, not
// only those with side effects (Chio's "config requires permission" rule).
func WithPermissionRequired(on bool) Option { return func(o *options) { o.requirePermission = on } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithReplicas sets the replicas of the CHIO_ACP_TASKS bucket (1 by
// default), as the other buckets of a deployment are set.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithTaskTTL sets how long a deferred task is kept (DefaultTaskTTL by
// default): a task never resumed must not stay forever.
func WithTaskTTL(d time.Duration) Option { return func(o *options) { o.taskTTL = d } }

// WithPublicOrigin sets the origin ("https://tools.example") clients
// address this edge by, which their DPoP proofs name (htu); by default the
// request's Host and whether it came over TLS decide.
func WithPublicOrigin(origin string) Option { return func(o *options) { o.origin = origin } }

// WithAgentInfo sets the name and version initialize reports.
func WithAgentInfo(name, version string) Option {
	return func(o *options) { o.name, o.version = name, version }
}

// WithWriteTimeout bounds the write of one stdio answer (default 10 s):
// an editor that stops reading must not hold the edge's calls, or its
// shutdown, forever. Non-positive means the default.
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithMaxTasks caps the tasks the CHIO_ACP_TASKS bucket holds, of every
// state, until their TTL (DefaultMaxTasks by default; 0: no cap). Past
// it tool/stream answers CodeResourceExhausted; the tasks held can still
// be resumed, canceled and finished.
func WithMaxTasks(n int64) Option { return func(o *options) { o.maxTasks = n } }

// WithMaxLiveTasks bounds the pending and running tasks of one principal
// (DefaultMaxLiveTasks by default; 0: no bound), counted on every replica
// from the bucket itself.
func WithMaxLiveTasks(n int) Option { return func(o *options) { o.maxLiveTasks = n } }

// WithTaskLease sets how long a running task's lease lasts unrenewed
// (DefaultTaskLease by default): the edge running it renews it every
// third of that; once it runs out another replica's Sweep takes the task
// over. Keep it far above the clock skew between replicas.
func WithTaskLease(d time.Duration) Option { return func(o *options) { o.taskLease = d } }

// WithInstanceID names this edge replica as the holder of the task leases
// it takes (a random id by default).
func WithInstanceID(id string) Option { return func(o *options) { o.instanceID = id } }
