package guards

import (
	"net/netip"
	"testing"
)

func TestNonPublicAddr(t *testing.T) {
	tests := []struct {
		addr string
		want string // "" = public
	}{
		{"93.184.215.14", ""},
		{"2606:4700:4700::1111", ""},
		{"169.254.169.254", "link-local address"},
		{"::ffff:169.254.169.254", "link-local address"},
		{"fe80::1%eth0", "link-local address"},
		{"::ffff:0:a9fe:a9fe", "link-local address (embedded in IPv6)"},
		{"::ffff:0:10.1.2.3", "private address (embedded in IPv6)"},
		{"::ffff:0:0:0", "unspecified address (embedded in IPv6)"},
		{"::ffff:0:808:808", ""},
		{"::fffe:0:a9fe:a9fe", ""},   // just below the IPv4-translated prefix
		{"::1:ffff:0:a9fe:a9fe", ""}, // just above it
		{"64:ff9b::a9fe:a9fe", "link-local address (embedded in IPv6)"},
		{"2002:a9fe:a9fe::1", "link-local address (embedded in IPv6)"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", "Teredo address"},
		{"2001::f7f7:f7f7", "Teredo address"},
		{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "Teredo address"},
		{"2001:1::1", ""}, // just past Teredo
		{"2001:db8::1", "non-public address"},
		{"198.51.100.7", "non-public address"},
		{"203.0.113.7", "non-public address"},
		{"192.88.99.1", "non-public address"},
	}
	for _, tt := range tests {
		if got := NonPublicAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("NonPublicAddr(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got := NonPublicAddr(netip.Addr{}); got != "invalid address" {
		t.Errorf("NonPublicAddr(zero Addr) = %q", got)
	}
}

func TestNumericHost(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "93.184.215.14", "0.0.0.0"} {
		if addr, numeric := NumericHost(h); !numeric || addr != netip.MustParseAddr(h) {
			t.Errorf("NumericHost(%q) = %v, %v; want the address", h, addr, numeric)
		}
	}
	for _, h := range []string{"2130706433", "0x7f000001", "0X7F000001", "0x7f.0.0.1",
		"0177.0.0.1", "010.0.0.1", "127.1", "1.2.3.4.5", "example.123", "example.0xAb", "0x"} {
		if addr, numeric := NumericHost(h); !numeric || addr.IsValid() {
			t.Errorf("NumericHost(%q) = %v, %v; want numeric, no address", h, addr, numeric)
		}
	}
	for _, h := range []string{"example.com", "123.example.com", "0x7f.example.com", "example.0xg", "example.", ""} {
		if addr, numeric := NumericHost(h); numeric || addr.IsValid() {
			t.Errorf("NumericHost(%q) = %v, %v; want not numeric", h, addr, numeric)
		}
	}
}
