// Command editor is a minimal ACP editor (internal/acptest.Editor on the
// official Go SDK): it starts the agent command given after --, serves
// files under --root and terminals as local processes, answers permission
// requests as --answer says, sends --script as one prompt and prints what
// the agent said.
//
//	editor --root DIR --script 'read DIR/a.txt;run echo hi' -- chio edge acp --proxy -- agent
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/chio-ledger/chio/internal/acptest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "editor:", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", ".", "the project directory whose files the editor serves")
	script := flag.String("script", "", "the prompt: agent steps separated by ';'")
	answer := flag.String("answer", "allow", "the human's answer to permission requests: allow, reject or cancel")
	timeout := flag.Duration("timeout", time.Minute, "how long the session may take")
	flag.Parse()
	if flag.NArg() == 0 {
		return fmt.Errorf("usage: editor --root DIR --script STEPS -- AGENT [ARGS...]")
	}
	ed := &acptest.Editor{Root: *root, Answer: func(p acp.RequestPermissionRequest) string {
		for _, o := range p.Options {
			if (*answer == "allow" && strings.HasPrefix(string(o.Kind), "allow")) || (*answer == "reject" && strings.HasPrefix(string(o.Kind), "reject")) {
				return string(o.OptionId)
			}
		}
		return ""
	}}
	defer ed.Close()
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the agent: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conn := ed.Connect(in, out)
	conn.SetLogger(acptest.Quiet())
	said, err := ed.Run(ctx, conn, strings.ReplaceAll(*script, ";", "\n"))
	fmt.Print(said)
	in.Close()
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("the agent: %w", werr)
	}
	return err
}
