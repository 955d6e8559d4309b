package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion describes this binary from what the Go toolchain embedded:
// the module version (a tag with go install …@vX, a pseudo-version from
// a git checkout, "(devel)" without version control information), the
// commit and whether the tree was modified (images build with
// -buildvcs=false and have neither), and the Go version and platform.
func buildVersion() string {
	version, commit, modified := "(unknown)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	out := "chio " + version
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if modified {
			commit += "+modified"
		}
		out += " commit " + commit
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and platform of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return nil
		},
	}
}
