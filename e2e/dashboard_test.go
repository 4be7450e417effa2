package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

const chromiumInstall = "apt-get update && apt-get install -y chromium"

// chromium returns the browser's path. Without one the test fails in CI (CI=true) and skips
// elsewhere, saying in both cases how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "the dashboard browser test needs Chromium, which is not installed; install it with: " + chromiumInstall
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestDashboardInBrowser drives a follower's dashboard in headless Chromium on a real 3-worker
// cluster. It checks what a person sees: the leader's id and epoch, a job's progress, a new
// leader after a SIGKILL half-way, and the progress bar reaching 100 %.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	const token = "dashboard-e2e-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	c := start(t, cluster.Options{Workers: 3, LeaseDuration: lease, Concurrency: 2,
		Env: []string{"ACQUIRE_INTERVAL=" + acquireEvery.String(), "API_TOKEN_FILE=" + tokenFile}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old := leader(t, c)

	// Watch from a follower: it outlives the leader's death.
	var follower, addr string
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		for _, m := range c.Members() {
			if m.ID != old.ID && m.HTTPAddr != "" {
				follower, addr = m.ID, m.HTTPAddr
				return true
			}
		}
		return false
	}, "a follower announces its HTTP address")
	url := "http://" + addr + "/"
	t.Logf("dashboard of %s at %s; leader %s (epoch %d)", follower, url, old.ID, old.Epoch)

	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	if err := chromedp.Run(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s in Chromium: %v", url, err)
	}

	// text returns the text content of the first element matching sel ("" when absent).
	text := func(sel string) string {
		var s string
		js := fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)
		if err := chromedp.Run(bctx, chromedp.Evaluate(js, &s)); err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	waitText := func(within time.Duration, sel, what string, ok func(string) bool) string {
		t.Helper()
		var last string
		var status, page string
		testenv.Eventually(t, within, 200*time.Millisecond, func() bool {
			last, status = text(sel), text("#status")
			_ = chromedp.Run(bctx, chromedp.Evaluate(`location.href + " " + document.readyState + " " + (document.body ? document.body.innerHTML.length : -1)`, &page))
			return ok(last)
		}, "the dashboard shows %s (%s reads %q; the page's status: %q; page %s)", what, sel, lazy(func() string { return last }),
			lazy(func() string { return status }), lazy(func() string { return page }))
		return last
	}
	waitText(20*time.Second, "#leader-id", "the leader "+old.ID, func(s string) bool { return s == old.ID })
	waitText(5*time.Second, "#leader-epoch", "epoch "+fmt.Sprint(old.Epoch), func(s string) bool { return s == fmt.Sprint(old.Epoch) })
	waitText(10*time.Second, "#workers tbody", "three workers", func(s string) bool {
		return strings.Contains(s, "w1") && strings.Contains(s, "w2") && strings.Contains(s, "w3")
	})

	// A job runs: the page shows it part-way.
	id, err := c.Client.Submit(ctx, "sleep", json.RawMessage(`{"shards":150,"duration":"300ms"}`))
	if err != nil {
		t.Fatal(err)
	}
	pct := func(s string) int {
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(s, "%", 2)[0]))
		if err != nil {
			return -1
		}
		return n
	}
	row := fmt.Sprintf(`tr.job[data-id=%q] .pct`, id)
	waitText(60*time.Second, row, "the job part-way", func(s string) bool { p := pct(s); return p >= 25 && p <= 70 })
	screenshot(t, bctx, "dashboard-running.png")

	// The leader dies: the page shows another leader with a higher epoch, and the job finishes.
	if _, err := c.Signal(old.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next := waitText(3*lease, "#leader-id", "a new leader", func(s string) bool { return s != "" && s != old.ID && s != "none" })
	ep, _ := strconv.ParseUint(text("#leader-epoch"), 10, 64)
	if ep <= old.Epoch {
		t.Fatalf("the dashboard shows leader %s with epoch %d, not above the killed leader's %d", next, ep, old.Epoch)
	}
	t.Logf("the dashboard showed %s (epoch %d) %v after %s was killed", next, ep, time.Since(killed).Round(100*time.Millisecond), old.ID)
	waitText(10*time.Second, "#workers tbody", "the killed worker gone from the live workers", func(s string) bool {
		return !strings.Contains(s, old.ID) && strings.Contains(s, next)
	})
	waitText(10*time.Second, "#epochs tbody", "both terms in the epoch history", func(s string) bool {
		return strings.Contains(s, old.ID) && strings.Contains(s, next)
	})
	waitText(90*time.Second, row, "the job at 100 %", func(s string) bool { return pct(s) == 100 })
	waitText(10*time.Second, fmt.Sprintf(`tr.job[data-id=%q]`, id), "the job succeeded", func(s string) bool { return strings.Contains(s, "succeeded") })
	waitText(10*time.Second, "#timeline", "the election on the job's timeline", func(s string) bool {
		return strings.Contains(s, fmt.Sprintf("elected %s (epoch %d)", next, ep))
	})
	screenshot(t, bctx, "dashboard-after-failover.png")

	// The detail view of the job that survived the leader's death: its parameters, times, the
	// leader that finished it and a link to its exact result.
	// A re-render can replace the node chromedp found before its click lands ("Could not find
	// node with given id"): that click was never dispatched (the node is resolved before the mouse
	// events), so it is tried again on the node now in the page, for a few seconds.
	click := func(sel string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := chromedp.Run(bctx, chromedp.Click(sel, chromedp.ByQuery))
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), "Could not find node with given id") || time.Now().After(deadline) {
				t.Fatalf("click %s: %v", sel, err)
			}
			t.Logf("click %s: %v; again on the node now in the page", sel, err)
			time.Sleep(50 * time.Millisecond)
		}
	}
	click(fmt.Sprintf(`tr.job[data-id=%q] td`, id))
	waitText(10*time.Second, "#detail-id", "the detail of "+id, func(s string) bool { return s == id })
	waitText(5*time.Second, "#detail-state", "succeeded", func(s string) bool { return s == "succeeded" })
	waitText(5*time.Second, "#detail-params", "the job's params", func(s string) bool { return strings.Contains(s, `"shards": 150`) })
	waitText(5*time.Second, "#detail-finished", "when it finished", func(s string) bool { return strings.Contains(s, "took") })
	waitText(5*time.Second, "#detail-epochs", "the leader after the kill checkpointed it", func(s string) bool {
		return strings.Contains(s, fmt.Sprintf("last checkpoint by epoch %d", ep))
	})
	// Resumed from the dead leader's checkpoint, or planned anew when it died before its first.
	waitText(10*time.Second, "#detail-events", "the job taken over and finished by the new leader", func(s string) bool {
		return strings.Contains(s, fmt.Sprintf("by %s (epoch %d)", next, ep)) && strings.Contains(s, "job finished")
	})
	var href string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`(document.querySelector("#detail-result-link") || {}).href || ""`, &href)); err != nil || href == "" {
		t.Fatalf("no result link in the detail view (%v)", err)
	}
	if code, body := call(t, "GET", href, "", ""); code != 200 || strings.TrimSpace(body) != `{"shards":150,"index_sum":11175}` {
		t.Fatalf("the detail view's result link %s: %d %s", href, code, body)
	}
	screenshot(t, bctx, "dashboard-job-detail.png")

	// Clicking a job gave it an address; that address, opened afresh (a bookmark, a link in an
	// alert), loads the job by itself, and the search box finds a job by its id's prefix.
	var loc string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`location.pathname`, &loc)); err != nil || loc != "/jobs/"+id {
		t.Fatalf("the page's address after clicking job %s is %q (%v); want /jobs/%s", id, loc, err, id)
	}
	if err := chromedp.Run(bctx, chromedp.Navigate(url+"jobs/"+id)); err != nil {
		t.Fatal(err)
	}
	waitText(20*time.Second, "#detail-id", "the deep link's job "+id, func(s string) bool { return s == id })
	waitText(10*time.Second, "#detail-state", "the deep link's job succeeded", func(s string) bool { return s == "succeeded" })
	waitText(10*time.Second, "#leader-id", "the leader, read through the page's base", func(s string) bool { return s == next })
	screenshot(t, bctx, "dashboard-deep-link.png")
	if err := chromedp.Run(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitText(20*time.Second, "#leader-id", "the dashboard again", func(s string) bool { return s == next })
	if err := chromedp.Run(bctx, chromedp.SetValue("#search", id[:len(id)-3], chromedp.ByQuery), chromedp.Submit("#search", chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	waitText(10*time.Second, "#detail-id", "the job found by its id's prefix", func(s string) bool { return s == id })

	// An action: without the token the page offers none; with it, cancel a running job.
	long, err := c.Client.Submit(ctx, "sleep", json.RawMessage(`{"shards":4,"duration":"10m"}`))
	if err != nil {
		t.Fatal(err)
	}
	waitText(20*time.Second, fmt.Sprintf(`tr.job[data-id=%q]`, long), "the long job", func(s string) bool { return s != "" })
	click(fmt.Sprintf(`tr.job[data-id=%q] td`, long))
	waitText(10*time.Second, "#detail-id", "the detail of "+long, func(s string) bool { return s == long })
	// What the running job waits for: its slowest task and the worker running it.
	waitText(20*time.Second, "#detail-why", "the running job's slowest task and its worker", func(s string) bool {
		return strings.Contains(s, "slowest task: shard ") && strings.Contains(s, " attempt 1 on ")
	})
	hidden := func() bool {
		var h bool
		_ = chromedp.Run(bctx, chromedp.Evaluate(`document.querySelector("#detail-cancel").hidden`, &h))
		return h
	}
	if !hidden() {
		t.Fatal("the page offers cancel without the API token")
	}
	if err := chromedp.Run(bctx, chromedp.SetValue("#api-token", token, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	click("#token-save")
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { return !hidden() }, "the cancel button appears with the token")
	click("#detail-cancel")
	waitText(5*time.Second, "#detail-cancel", "the button asks to confirm", func(s string) bool { return strings.Contains(s, "click again") })
	click("#detail-cancel")
	waitText(10*time.Second, "#detail-action", "the cancel accepted", func(s string) bool { return strings.Contains(s, "cancel requested for "+long) })
	waitText(30*time.Second, "#detail-state", "the job cancelled", func(s string) bool { return s == "cancelled" })
	screenshot(t, bctx, "dashboard-cancelled.png")

	// The state filter lists the cancelled job alone.
	if err := chromedp.Run(bctx, chromedp.Evaluate(`(() => { const s = document.querySelector("#filter-state"); s.value = "cancelled"; s.dispatchEvent(new Event("change")); })()`, nil)); err != nil {
		t.Fatal(err)
	}
	waitText(10*time.Second, "#jobs tbody", "only the cancelled job", func(s string) bool { return strings.Contains(s, long) && !strings.Contains(s, id) })

	// Retry the cancelled job (the detail follows the new one, whose attempts list the original),
	// then delete the original.
	click(fmt.Sprintf(`tr.job[data-id=%q] td`, long))
	waitText(10*time.Second, "#detail-id", "the detail of "+long, func(s string) bool { return s == long })
	click("#detail-retry")
	waitText(5*time.Second, "#detail-retry", "the retry button asks to confirm", func(s string) bool { return strings.Contains(s, "click again") })
	click("#detail-retry")
	waitText(10*time.Second, "#detail-action", "the retry accepted", func(s string) bool { return strings.Contains(s, "retried "+long+" as ") })
	waitText(10*time.Second, "#detail-attempts", "the retry's attempts name the original", func(s string) bool { return strings.Contains(s, long) && strings.Contains(s, "this one") })
	click(fmt.Sprintf(`tr.job[data-id=%q] td`, long))
	waitText(10*time.Second, "#detail-id", "the detail of "+long, func(s string) bool { return s == long })
	waitText(5*time.Second, "#detail-checkpoint", "the checkpoint's writes", func(s string) bool { return strings.Contains(s, "written") })
	click("#detail-delete")
	click("#detail-delete")
	waitText(10*time.Second, "#detail-action", "the delete done", func(s string) bool { return strings.Contains(s, "deleted "+long) })
	if _, err := c.Client.Status(ctx, long); !errors.Is(err, client.ErrNoSuchJob) {
		t.Fatalf("the deleted job: %v; want no such job", err)
	}

	// The schedules panel: a schedule with its next tick.
	if _, err := c.Client.AddSchedule(ctx, "nightly", client.ScheduleOptions{Every: 24 * time.Hour, Type: "sleep", Params: json.RawMessage(`{"shards":1}`)}); err != nil {
		t.Fatal(err)
	}
	waitText(10*time.Second, `#schedules tr[data-name="nightly"]`, "the schedule with its next tick", func(s string) bool {
		return strings.Contains(s, "every 24h0m0s") && strings.Contains(s, "active")
	})
	click(`#schedules tr[data-name="nightly"] button.sched-pause`)
	waitText(10*time.Second, `#schedules tr[data-name="nightly"]`, "the schedule paused from the page", func(s string) bool {
		return strings.Contains(s, "paused") && strings.Contains(s, "resume")
	})
	// A chain schedule names every step's type.
	if _, err := c.Client.AddSchedule(ctx, "chained", client.ScheduleOptions{Every: 24 * time.Hour, Type: "sleep", Params: json.RawMessage(`{"shards":1}`),
		Then: []client.ChainStep{{Type: "sleep", Params: json.RawMessage(`{"shards":2}`)}}}); err != nil {
		t.Fatal(err)
	}
	waitText(10*time.Second, `#schedules tr[data-name="chained"]`, "the chain schedule with its steps", func(s string) bool {
		return strings.Contains(s, "sleep → sleep")
	})
	screenshot(t, bctx, "dashboard-schedules.png")
}

// screenshot saves the page as a PNG in the test's artifact directory and, when ARTIFACTS_DIR is
// set, there too.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("ARTIFACTS_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
}

// lazy formats as what its function returns when printed: a failure message shows the last values
// read, not those when the message's arguments were evaluated.
type lazy func() string

func (l lazy) String() string { return l() }
