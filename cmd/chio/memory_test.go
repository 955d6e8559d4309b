package main

import (
	"errors"
	"testing"
)

func TestMemoryBudget(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		limit string
		want  memoryBudget
		bad   bool
	}{
		{limit: "256MiB", want: memoryBudget{limit: 256 * mib, logCache: 32 * mib, logMemTbl: 8 * mib, projCache: 16 * mib, projMemTbl: 4 * mib}},
		{limit: "1GiB", want: memoryBudget{limit: 1024 * mib, logCache: 128 * mib, logMemTbl: 32 * mib, projCache: 64 * mib, projMemTbl: 16 * mib}},
		// The floors, at the least limit taken.
		{limit: "64MiB", want: memoryBudget{limit: 64 * mib, logCache: 8 * mib, logMemTbl: 4 * mib, projCache: 8 * mib, projMemTbl: 4 * mib}},
		{limit: "0", want: memoryBudget{}},
		{limit: "63MiB", bad: true},
		{limit: "lots", bad: true},
		{limit: "-1GiB", bad: true},
		// GOMEMLIMIT's own forms, the default when the environment sets it.
		{limit: memoryLimitDefault("off"), want: memoryBudget{}},
		{limit: memoryLimitDefault("512MiB"), want: memoryBudget{limit: 512 * mib, logCache: 64 * mib, logMemTbl: 16 * mib, projCache: 32 * mib, projMemTbl: 8 * mib}},
		{limit: memoryLimitDefault(""), want: memoryBudget{limit: 512 * mib, logCache: 64 * mib, logMemTbl: 16 * mib, projCache: 32 * mib, projMemTbl: 8 * mib}},
	}
	for _, tc := range tests {
		t.Run(tc.limit, func(t *testing.T) {
			got, err := (&memoryFlags{limit: tc.limit}).budget()
			var ee *exitError
			switch {
			case tc.bad && (!errors.As(err, &ee) || ee.code != 2):
				t.Fatalf("budget(%q) = %+v, %v; want a usage error", tc.limit, got, err)
			case !tc.bad && (err != nil || got != tc.want):
				t.Fatalf("budget(%q) = %+v, %v; want %+v", tc.limit, got, err, tc.want)
			}
		})
	}
}
