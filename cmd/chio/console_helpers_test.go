package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browserPath finds a Chromium for the console's browser tests: $CHIO_CHROMIUM,
// else chromium, chromium-browser or google-chrome on PATH. Without one the
// test is skipped, unless CHIO_BROWSER_TEST=1 (CI), which makes it fail.
func browserPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHIO_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CHIO_BROWSER_TEST") == "1" {
		t.Fatal("CHIO_BROWSER_TEST=1 but no browser: set CHIO_CHROMIUM or put chromium on PATH")
	}
	t.Skip("no Chromium found (set CHIO_CHROMIUM, or CHIO_BROWSER_TEST=1 to make this a failure)")
	return ""
}

// screenshotDir is $CHIO_SCREENSHOTS, else a temporary directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CHIO_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// newBrowser starts a headless Chromium (no sandbox: CI runs as root) with
// a 1280x800 window, stopped at cleanup.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath(t)), chromedp.NoSandbox, chromedp.Headless,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", browserPath(t), err)
	}
	return ctx
}

// consoleTab is one browser tab on the console of one origin.
type consoleTab struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
	loads int

	mu       sync.Mutex
	problems []string // CSP violations and uncaught exceptions, not yet reported
}

// newTab opens a tab of browser on the console served at base.
func newTab(t *testing.T, browser context.Context, base, shots string) *consoleTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	c := &consoleTab{t: t, ctx: ctx, base: base, shots: shots}
	// The page must run under its CSP without a violation or an error.
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			if e.Entry.Source == cdplog.EntrySourceSecurity || strings.Contains(e.Entry.Text, "Content Security Policy") {
				msg = "security: " + e.Entry.Text
			}
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if x := e.ExceptionDetails.Exception; x != nil {
				msg += " " + x.Description
			}
		}
		if msg != "" {
			c.mu.Lock()
			c.problems = append(c.problems, msg)
			c.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkProblems fails the test for each CSP violation or uncaught
// exception seen since the last check.
func (c *consoleTab) checkProblems(where string) {
	c.t.Helper()
	c.mu.Lock()
	p := c.problems
	c.problems = nil
	c.mu.Unlock()
	for _, m := range p {
		c.t.Errorf("%s: %s", where, m)
	}
}

// open loads the console afresh at route (e.g. "#/receipts") and waits
// until the page has rendered (main[data-loaded]): a new query string
// makes it a new document, so nothing of the last page is waited on.
func (c *consoleTab) open(route string) {
	c.t.Helper()
	c.navigate(route)
	c.waitJS(`document.getElementById('main')?.dataset.loaded`)
	c.checkProblems(route)
}

// navigate loads the console afresh at route without waiting for the page
// to render.
func (c *consoleTab) navigate(route string) {
	c.t.Helper()
	c.loads++
	url := c.base + "/console/?load=" + strconv.Itoa(c.loads) + route
	if err := chromedp.Do(c.ctx, chromedp.Navigate(url)); err != nil {
		c.t.Fatalf("open %s: %v", url, err)
	}
}

// waitJS waits until expression is truthy in the page.
func (c *consoleTab) waitJS(expression string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		c.t.Fatalf("waiting for %s: %v\npage: %.2000s", expression, err, c.text("main"))
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](c *consoleTab, expression string, opts ...chromedp.EvaluateOption) T {
	c.t.Helper()
	v, err := chromedp.Run(c.ctx, chromedp.Evaluate[T](expression, opts...))
	if err != nil {
		c.t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}

// text is the visible text of the first element selector matches ("" if none).
func (c *consoleTab) text(selector string) string {
	v, _ := chromedp.Run(c.ctx, chromedp.Evaluate[string](`document.querySelector(`+jsString(selector)+`)?.innerText ?? ""`))
	return v
}

// attrs is the attribute name of every element selector matches.
func (c *consoleTab) attrs(selector, name string) []string {
	c.t.Helper()
	return eval[[]string](c, `Array.from(document.querySelectorAll(`+jsString(selector)+`), (e) => e.getAttribute(`+jsString(name)+`))`)
}

// signIn signs in through the form with token.
func (c *consoleTab) signIn(token string) {
	c.t.Helper()
	c.open("#/signin")
	if err := chromedp.Do(c.ctx, chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#signin button[type=submit]`))); err != nil {
		c.t.Fatalf("sign in: %v", err)
	}
	c.waitJS(`sessionStorage.getItem('chio.token') === ` + jsString(token))
}

// signOut signs out with the header's button.
func (c *consoleTab) signOut() {
	c.t.Helper()
	if err := chromedp.Do(c.ctx, chromedp.Click(chromedp.ID("signout"))); err != nil {
		c.t.Fatalf("sign out: %v", err)
	}
	c.waitJS(`sessionStorage.getItem('chio.token') === null`)
}

// screenshot saves a full-page PNG as name.png in the screenshot directory.
func (c *consoleTab) screenshot(name string) string {
	c.t.Helper()
	png, err := chromedp.Run(c.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(c.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func setValue(id, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.ID(id), v)
}

func clickID(id string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.ID(id)) }

// doSteps runs actions in the tab.
func doSteps(c *consoleTab, steps ...chromedp.Action[chromedp.Void]) error {
	return chromedp.Do(c.ctx, steps...)
}
