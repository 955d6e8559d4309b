package push

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	alice = "alice-key|acme"
	bob   = "bob-key|acme"
)

func newTaskID() string { return uuid.Must(uuid.NewV7()).String() }

func TestStoreCRUD(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task := newTaskID()

	got, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://hooks.example.com/a", Token: "tok",
		AuthScheme: "Bearer", AuthCredentials: "s3cr3t", Version: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := uuid.Parse(got.ID); err != nil || u.Version() != 7 {
		t.Fatalf("generated id %q is not a UUIDv7", got.ID)
	}
	if got.Created.IsZero() {
		t.Fatal("Created not set")
	}
	read, err := e.store.Get(ctx, alice, task, got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !read.Created.Equal(got.Created) {
		t.Fatalf("Created %v, want %v", read.Created, got.Created)
	}
	read.Created = got.Created
	if read != got {
		t.Fatalf("Get = %+v, want %+v", read, got)
	}

	// Same id replaces.
	got.URL, got.Token = "https://hooks.example.com/b", "tok2"
	if _, err := e.store.Put(ctx, got); err != nil {
		t.Fatal(err)
	}
	read, err = e.store.Get(ctx, alice, task, got.ID)
	if err != nil || read.URL != "https://hooks.example.com/b" || read.Token != "tok2" {
		t.Fatalf("after replace: %+v, %v", read, err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 1 {
		t.Fatalf("ForTask after replace = %d configs, %v; want 1", len(all), err)
	}

	// A caller-chosen id, with characters a KV key may not hold.
	odd := Config{ID: "a.b *>/:=", TaskID: task, Owner: alice, URL: "https://hooks.example.com/c"}
	if _, err := e.store.Put(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if c, err := e.store.Get(ctx, alice, task, odd.ID); err != nil || c.URL != odd.URL {
		t.Fatalf("Get odd id: %+v, %v", c, err)
	}

	// Delete, twice.
	for range 2 {
		if err := e.store.Delete(ctx, alice, task, got.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.Get(ctx, alice, task, got.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := e.store.Delete(ctx, alice, task, "never-existed"); err != nil {
		t.Fatalf("Delete of a missing config: %v", err)
	}
	if err := e.store.Delete(ctx, alice, newTaskID(), "x"); err != nil {
		t.Fatalf("Delete on a task without configs: %v", err)
	}
	// A deleted id can be created again.
	if _, err := e.store.Put(ctx, Config{ID: got.ID, TaskID: task, Owner: alice, URL: "https://hooks.example.com/d"}); err != nil {
		t.Fatal(err)
	}
	if c, err := e.store.Get(ctx, alice, task, got.ID); err != nil || c.URL != "https://hooks.example.com/d" {
		t.Fatalf("re-created config: %+v, %v", c, err)
	}
}

func TestStoreOwnerScoping(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task := newTaskID()
	a, err := e.store.Put(ctx, Config{ID: "shared-id", TaskID: task, Owner: alice, URL: "https://alice.example.com/"})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := e.store.Get(ctx, bob, task, a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob Get alice's config: %v, want ErrNotFound", err)
	}
	_, errMissing := e.store.Get(ctx, bob, task, "no-such-id")
	_, errOther := e.store.Get(ctx, bob, task, a.ID)
	if errMissing.Error() != errOther.Error() {
		t.Fatalf("another owner's config (%v) is distinguishable from a missing one (%v)", errOther, errMissing)
	}
	if list, next, err := e.store.List(ctx, bob, task, 0, ""); err != nil || len(list) != 0 || next != "" {
		t.Fatalf("bob List = %v %q %v, want empty", list, next, err)
	}
	// Bob's delete of alice's id is a no-op.
	if err := e.store.Delete(ctx, bob, task, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(ctx, alice, task, a.ID); err != nil {
		t.Fatalf("alice's config after bob's delete: %v", err)
	}
	// Bob's Put with alice's id creates bob's own config, it does not
	// replace alice's.
	if _, err := e.store.Put(ctx, Config{ID: a.ID, TaskID: task, Owner: bob, URL: "https://bob.example.com/"}); err != nil {
		t.Fatal(err)
	}
	if c, err := e.store.Get(ctx, alice, task, a.ID); err != nil || c.URL != "https://alice.example.com/" {
		t.Fatalf("alice's config after bob's Put: %+v, %v", c, err)
	}
	if c, err := e.store.Get(ctx, bob, task, a.ID); err != nil || c.URL != "https://bob.example.com/" {
		t.Fatalf("bob's config: %+v, %v", c, err)
	}
	list, _, err := e.store.List(ctx, alice, task, 0, "")
	if err != nil || len(list) != 1 || list[0].Owner != alice {
		t.Fatalf("alice List = %+v, %v", list, err)
	}
	all, err := e.store.ForTask(ctx, task)
	if err != nil || len(all) != 2 {
		t.Fatalf("ForTask = %+v, %v; want both owners' configs", all, err)
	}
	// Configs of another task are not listed.
	if _, err := e.store.Put(ctx, Config{TaskID: newTaskID(), Owner: alice, URL: "https://alice.example.com/"}); err != nil {
		t.Fatal(err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 2 {
		t.Fatalf("ForTask after another task's Put = %d, %v", len(all), err)
	}
}

func TestStoreListPaging(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task := newTaskID()
	var ids []string
	for i := range 7 {
		c, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: fmt.Sprintf("https://h.example.com/%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: task, Owner: bob, URL: "https://bob.example.com/"}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	tok := ""
	pages := 0
	for {
		page, next, err := e.store.List(ctx, alice, task, 3, tok)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > 3 {
			t.Fatalf("page of %d configs, size 3", len(page))
		}
		for _, c := range page {
			seen = append(seen, c.ID)
		}
		if next == "" {
			break
		}
		tok = next
	}
	if pages != 3 || strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Fatalf("%d pages, ids %v; want 3 pages, %v (creation order)", pages, seen, ids)
	}
	if all, next, err := e.store.List(ctx, alice, task, 0, ""); err != nil || len(all) != 7 || next != "" {
		t.Fatalf("default page: %d configs, next %q, %v", len(all), next, err)
	}
	if _, _, err := e.store.List(ctx, alice, task, 3, "garbage"); !errors.Is(err, ErrInvalidPageToken) {
		t.Fatalf("bad token: %v", err)
	}
	if _, _, err := e.store.List(ctx, alice, task, -1, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative page size: %v", err)
	}
}

func TestStoreLimit(t *testing.T) {
	e := newEnv(t, WithMaxConfigsPerTask(4))
	ctx := t.Context()
	task := newTaskID()
	var first Config
	for i := range 3 {
		c, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = c
		}
	}
	// The limit counts every owner.
	if _, err := e.store.Put(ctx, Config{TaskID: task, Owner: bob, URL: "https://h.example.com/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("fifth config: %v, want ErrTooMany", err)
	}
	// Replacing is not adding.
	first.URL = "https://h.example.com/replaced"
	if _, err := e.store.Put(ctx, first); err != nil {
		t.Fatalf("replace at the limit: %v", err)
	}
	// Deleting makes room.
	if err := e.store.Delete(ctx, alice, task, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}

	// Concurrent Puts never leave more than the limit.
	task2 := newTaskID()
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			_, err := e.store.Put(ctx, Config{TaskID: task2, Owner: alice, URL: "https://h.example.com/"})
			if err != nil && !errors.Is(err, ErrTooMany) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	all, err := e.store.ForTask(ctx, task2)
	if err != nil || len(all) > 4 {
		t.Fatalf("after concurrent Puts: %d configs, %v; want at most 4", len(all), err)
	}
	t.Logf("%d of 12 concurrent Puts succeeded", len(all))
	// Whatever the race left, the task fills up to its limit, not beyond.
	for range 4 - len(all) {
		if _, err := e.store.Put(ctx, Config{TaskID: task2, Owner: alice, URL: "https://h.example.com/"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.Put(ctx, Config{TaskID: task2, Owner: alice, URL: "https://h.example.com/"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Put beyond the limit after the race: %v", err)
	}
}

func TestStoreDeleteTask(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task, other := newTaskID(), newTaskID()
	for _, owner := range []string{alice, bob} {
		for _, tk := range []string{task, other} {
			if _, err := e.store.Put(ctx, Config{TaskID: tk, Owner: owner, URL: "https://h.example.com/"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleted, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete(ctx, alice, task, deleted.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DeleteTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DeleteTask(ctx, task); err != nil {
		t.Fatalf("second DeleteTask: %v", err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("ForTask after DeleteTask = %d, %v", len(all), err)
	}
	if all, err := e.store.ForTask(ctx, other); err != nil || len(all) != 2 {
		t.Fatalf("other task after DeleteTask = %d, %v; want 2", len(all), err)
	}
	// Nothing of the task's configs is left in the bucket, no marker.
	s, err := e.js.Stream(ctx, bucketStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(bucketSubjectPrefix+taskPrefix(task)+">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Fatalf("task subjects left: %v", info.State.Subjects)
	}
}

// CloseTask marks the task closed and has every config of it, of every
// owner, expire: readable until then, gone after, with no timer of the
// process's taking part.
func TestStoreCloseTask(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task, other := newTaskID(), newTaskID()
	var mine []Config
	for _, owner := range []string{alice, bob} {
		c, err := e.store.Put(ctx, Config{TaskID: task, Owner: owner, URL: "https://h.example.com/"})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, c)
	}
	kept, err := e.store.Put(ctx, Config{TaskID: other, Owner: alice, URL: "https://h.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := e.store.CloseTask(ctx, task, 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 2 {
		t.Fatalf("right after CloseTask: %d configs, %v; want both still readable", len(all), err)
	}
	if _, err := e.store.kv.Get(ctx, encodeID(task)); err != nil {
		t.Fatalf("the closed mark: %v", err)
	}
	waitForWithin(t, "the closed task's configs to expire", 30*time.Second, func() bool {
		for _, c := range mine {
			if _, err := e.store.Get(ctx, c.Owner, task, c.ID); !errors.Is(err, ErrNotFound) {
				return false
			}
		}
		return true
	})
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("after the expiry: %d configs, %v", len(all), err)
	}
	if got, err := e.store.Get(ctx, alice, other, kept.ID); err != nil || got.ID != kept.ID {
		t.Fatalf("another task's config: %+v %v", got, err)
	}
}

// Expire keeps the config readable until its TTL, then the bucket drops
// it: no timer of the process's takes part.
func TestStoreExpire(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task := newTaskID()
	cfg, err := e.store.Put(ctx, Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Expire(ctx, alice, task, cfg.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.Get(ctx, alice, task, cfg.ID); err != nil || got.URL != cfg.URL {
		t.Fatalf("right after Expire: %+v %v", got, err)
	}
	waitForWithin(t, "the config to expire", 30*time.Second, func() bool {
		_, err := e.store.Get(ctx, alice, task, cfg.ID)
		return errors.Is(err, ErrNotFound)
	})
	for _, c := range []struct {
		id  string
		ttl time.Duration
		err error
	}{{cfg.ID, time.Second, ErrNotFound}, {"nope", time.Second, ErrNotFound}, {cfg.ID, time.Millisecond, ErrInvalidArgument}} {
		if err := e.store.Expire(ctx, alice, task, c.id, c.ttl); !errors.Is(err, c.err) {
			t.Fatalf("Expire(%s, %s) = %v, want %v", c.id, c.ttl, err, c.err)
		}
	}
}

func TestStoreInvalid(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	task := newTaskID()
	ok := Config{TaskID: task, Owner: alice, URL: "https://h.example.com/"}
	for name, mut := range map[string]func(*Config){
		"no task":              func(c *Config) { c.TaskID = "" },
		"no owner":             func(c *Config) { c.Owner = "" },
		"no url":               func(c *Config) { c.URL = "" },
		"ftp url":              func(c *Config) { c.URL = "ftp://h.example.com/" },
		"relative url":         func(c *Config) { c.URL = "/hook" },
		"userinfo":             func(c *Config) { c.URL = "https://u:p@h.example.com/" },
		"token newline":        func(c *Config) { c.Token = "a\r\nX-Evil: 1" },
		"scheme with space":    func(c *Config) { c.AuthScheme = "Bearer x" },
		"credentials newline":  func(c *Config) { c.AuthScheme, c.AuthCredentials = "Bearer", "x\ny" },
		"credentials, no auth": func(c *Config) { c.AuthCredentials = "x" },
		"long id":              func(c *Config) { c.ID = strings.Repeat("x", MaxIDBytes+1) },
	} {
		c := ok
		mut(&c)
		if _, err := e.store.Put(ctx, c); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Put = %v, want ErrInvalidArgument", name, err)
		}
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("invalid Puts stored %d configs (%v)", len(all), err)
	}
	for _, ref := range [][3]string{{"", task, "x"}, {alice, "", "x"}, {alice, task, ""}} {
		if _, err := e.store.Get(ctx, ref[0], ref[1], ref[2]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get%q = %v, want ErrNotFound", ref, err)
		}
	}
}

// TestForTaskProbe: on a single-replica bucket ForTask probes for the
// task's keys first; the probe must answer "none" exactly, before any
// config, after its owner deleted it and after DeleteTask, and must not
// hide a config, whichever task's keys sort around it.
func TestForTaskProbe(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if !e.store.probe {
		t.Fatal("a single-replica bucket does not probe")
	}
	task, before, after := newTaskID(), newTaskID(), newTaskID()
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("ForTask before any config = %+v, %v", all, err)
	}
	for _, other := range []string{before, after} {
		if _, err := e.store.Put(ctx, Config{TaskID: other, Owner: "alice", URL: "https://alice.example.com/"}); err != nil {
			t.Fatal(err)
		}
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("ForTask with only other tasks' configs = %+v, %v", all, err)
	}
	c, err := e.store.Put(ctx, Config{TaskID: task, Owner: "alice", URL: "https://alice.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 1 || all[0].ID != c.ID {
		t.Fatalf("ForTask with a config = %+v, %v", all, err)
	}
	if err := e.store.Delete(ctx, "alice", task, c.ID); err != nil {
		t.Fatal(err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("ForTask after Delete = %+v, %v", all, err)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: task, Owner: "bob", URL: "https://bob.example.com/"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DeleteTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if all, err := e.store.ForTask(ctx, task); err != nil || len(all) != 0 {
		t.Fatalf("ForTask after DeleteTask = %+v, %v", all, err)
	}
}
