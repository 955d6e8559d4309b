package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestKeyedBucket(t *testing.T) {
	k := New(Config{Rate: 2, Burst: 3})
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if ok, _ := k.Allow("a", now); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := k.Allow("a", now)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst: %v, wait %s (want refused, 500ms)", ok, wait)
	}
	if ok, _ := k.Allow("b", now); !ok {
		t.Fatal("another key was refused")
	}
	if ok, _ := k.Allow("a", now.Add(499*time.Millisecond)); ok {
		t.Fatal("allowed before a token was back")
	}
	if ok, _ := k.Allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Fatal("refused once a token was back")
	}
	if New(Config{}) != nil {
		t.Fatal("rate 0 is no limit (nil)")
	}
	var off *Keyed
	if ok, _ := off.Allow("a", now); !ok || off.Len() != 0 {
		t.Fatal("a nil limiter refused")
	}
}

// However many keys a client takes on, the limiter tracks at most MaxKeys,
// and forgets those whose buckets have refilled.
func TestKeyedBoundsItsKeys(t *testing.T) {
	k := New(Config{Rate: 10, Burst: 10, MaxKeys: 100})
	now := time.Unix(1_000_000, 0)
	for i := range 10_000 {
		k.Allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
		if n := k.Len(); n > 100 {
			t.Fatalf("%d keys tracked after %d, bound 100", n, i+1)
		}
	}
	// A flood of new keys passes over the map once per tenth of the
	// bound, not once per key.
	k2 := New(Config{Rate: 1, MaxKeys: 1000})
	var full int
	for i := range 10_000 {
		if k2.Len() == 1000 {
			full++
		}
		k2.Allow(fmt.Sprint("key-", i), now) // one instant: nothing refills
	}
	if full > 10_000/100+1 {
		t.Fatalf("the map was full on %d of 10,000 new keys, want about one in a hundred", full)
	}
	// A second later every bucket has refilled: the next new key sweeps.
	k.Allow("late", now.Add(time.Second))
	if n := k.Len(); n != 1 {
		t.Fatalf("%d keys after the sweep, want 1", n)
	}
}

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"direct", "192.0.2.1:4000", nil, "192.0.2.1"},
		{"direct client's forwarded header ignored", "192.0.2.1:4000", []string{"198.51.100.7"}, "192.0.2.1"},
		{"through a trusted proxy", "10.1.1.1:4000", []string{"198.51.100.7"}, "198.51.100.7"},
		{"client-written hops left of the proxy's ignored", "10.1.1.1:4000", []string{"203.0.113.9, 198.51.100.7"}, "198.51.100.7"},
		{"two trusted proxies", "10.1.1.1:4000", []string{"198.51.100.7, 10.2.2.2"}, "198.51.100.7"},
		{"header split over lines", "10.1.1.1:4000", []string{"198.51.100.7", "10.2.2.2"}, "198.51.100.7"},
		{"garbage hop stops the walk", "10.1.1.1:4000", []string{"198.51.100.7, bogus, 10.2.2.2"}, "10.2.2.2"},
		{"trusted proxy without a header", "10.1.1.1:4000", nil, "10.1.1.1"},
		{"v4-mapped peer", "[::ffff:192.0.2.1]:4000", nil, "192.0.2.1"},
		{"ipv6 through a proxy", "[fd00::1]:4000", []string{"2001:db8::5"}, "2001:db8::5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := ClientAddr(r, trusted); got.String() != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	a, b := netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:1:2:ffff::9")
	if AddressKey(a) != AddressKey(b) || AddressKey(a) != "2001:db8:1:2::/64" {
		t.Fatalf("one /64, two keys: %s %s", AddressKey(a), AddressKey(b))
	}
	if AddressKey(netip.MustParseAddr("192.0.2.1")) == AddressKey(netip.MustParseAddr("192.0.2.2")) {
		t.Fatal("two IPv4 addresses share a key")
	}
}

// from dials the server from a given loopback address, as a distinct
// client (Linux routes all of 127.0.0.0/8 to the loopback interface).
func from(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
}

// A guarded server answers 429 past an address's limit, in the surface's
// form, with Retry-After, before the handler runs; other addresses are
// not held back, and each refusal is counted.
func TestGuardRefusesInTheSurfacesForm(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ran := 0
	g := &Guard{Address: New(Config{Rate: 0.001, Burst: 1}), Metrics: m,
		Surface: func(r *http.Request) (string, Form) {
			if r.URL.Path == "/rpc" {
				return "rpc", JSONRPC
			}
			return "rest", JSON
		}}
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran++ })))
	defer srv.Close()
	for _, tc := range []struct {
		client, path, surface string
		check                 func(map[string]any) bool
	}{
		{"127.0.0.2", "/rpc", "rpc", func(m map[string]any) bool {
			e, _ := m["error"].(map[string]any)
			return m["jsonrpc"] == "2.0" && m["id"] == nil && e["code"] == float64(CodeRateLimited) && strings.Contains(e["message"].(string), "retry after")
		}},
		{"127.0.0.3", "/rest", "rest", func(m map[string]any) bool {
			return m["code"] == "rate_limited" && m["retry_after_seconds"] == float64(1000)
		}},
	} {
		c := from(tc.client)
		resp, err := c.Post(srv.URL+tc.path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: first request: HTTP %d", tc.path, resp.StatusCode)
		}
		before := ran
		resp, err = c.Post(srv.URL+tc.path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1000" || !tc.check(body) {
			t.Fatalf("%s: second request: HTTP %d, Retry-After %q, %v", tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if ran != before {
			t.Fatalf("%s: the handler ran for a refused request", tc.path)
		}
		if n := count(t, m, tc.surface, ReasonAddress); n != 1 {
			t.Fatalf("%s: %v refusals counted, want 1", tc.surface, n)
		}
	}
	// A third address still gets through.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/rest", nil)
	resp, err := from("127.0.0.4").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: HTTP %d", resp.StatusCode)
	}
}

// count is the refusals m counted for surface and reason.
func count(t *testing.T, m *Metrics, surface, reason string) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.refused.WithLabelValues(surface, reason).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

// BenchmarkAllowNewKeysAtBound is a flood of new keys against a full map
// of the default size: each call must not pay for a pass over the map.
func BenchmarkAllowNewKeysAtBound(b *testing.B) {
	k := New(Config{Rate: 1})
	now := time.Unix(1_000_000, 0)
	for i := range DefaultMaxKeys {
		k.Allow(fmt.Sprint("warm-", i), now)
	}
	i := 0
	for b.Loop() {
		k.Allow(fmt.Sprint("flood-", i), now)
		i++
	}
}
