package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

// TestDashboardInBrowser_KeyedJobDeepLink opens /jobs/{id} of a finished keyed job in a fresh
// headless Chromium (the page has never seen the job run): it shows the job's phase, a link to
// its output that downloads exactly what `worker output` prints, and its timeline from storage
// (submitted, started, reduce done, finished), not "Collecting samples…". The other pages load by
// themselves too: /jobs (the job with its submitted and duration columns, and the last hour's
// charts with the job's latency), /epochs (the leading term's start), /workers and /schedules.
func TestDashboardInBrowser_KeyedJobDeepLink(t *testing.T) {
	exe := chromium(t)
	c := start(t, cluster.Options{Workers: 2, LeaseDuration: lease, Concurrency: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader(t, c)
	if err := rig.WriteKeyedCorpus(ctx, c, 4, 2000); err != nil {
		t.Fatal(err)
	}
	id, err := c.Client.Submit(ctx, "wordcount", rig.KeyedWordcountParams(2, 4<<10))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Client.Wait(ctx, id, 100*time.Millisecond, nil); err != nil || st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %+v, %v", id, st, err)
	}
	var want bytes.Buffer
	if _, err := c.Client.WriteOutput(ctx, id, &want, client.OutputOptions{}); err != nil {
		t.Fatal(err)
	}
	var addr string
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		for _, m := range c.Members() {
			if m.HTTPAddr != "" {
				addr = m.HTTPAddr
				return true
			}
		}
		return false
	}, "a worker announces its HTTP address")

	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	url := "http://" + addr + "/jobs/" + id
	if err := chromedp.Run(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s in Chromium: %v", url, err)
	}
	text := func(sel string) string {
		var s string
		if err := chromedp.Run(bctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel), &s)); err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	wait := func(sel, what string, ok func(string) bool) string {
		t.Helper()
		var last string
		testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() bool { last = text(sel); return ok(last) },
			"the page at %s shows %s (%s reads %q)", url, what, sel, lazy(func() string { return last }))
		return last
	}
	wait("#detail-id", "the job "+id, func(s string) bool { return s == id })
	wait("#detail-state", "succeeded", func(s string) bool { return s == "succeeded" })
	wait("#detail-phase", "the keyed phases done", func(s string) bool {
		return strings.Contains(s, "map and reduce done") && strings.Contains(s, "reduce: 2 of 2 partitions")
	})
	tl := wait("#timeline", "the stored timeline", func(s string) bool {
		return strings.Contains(s, "submitted") && strings.Contains(s, "started") && strings.Contains(s, "reduce done") && strings.Contains(s, "finished")
	})
	if strings.Contains(tl, "Collecting samples") {
		t.Fatalf("the timeline of a finished job waits for samples: %q", tl)
	}
	var order []string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`[...document.querySelectorAll("#timeline-marks li")].map(li => li.dataset.what)`, &order)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "submitted,started,reduce done,finished" {
		t.Errorf("the timeline's moments %v, want submitted, started, reduce done, finished in order", order)
	}
	var href string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`(document.querySelector("#detail-output-link") || {}).href || ""`, &href)); err != nil || href == "" {
		t.Fatalf("no output link on the page of keyed job %s (%v); output cell %q", id, err, text("#detail-output"))
	}
	code, body := call(t, "GET", href, "", "")
	if code != 200 || body != want.String() {
		t.Fatalf("the output link %s: %d, %d bytes; want 200 and the %d bytes `worker output` prints", href, code, len(body), want.Len())
	}
	screenshot(t, bctx, "dashboard-keyed-deep-link.png")

	// The jobs page: the job's row with when it was submitted and how long it took, and the
	// charts of the last hour with a point for the job's latency. Nothing of other pages.
	hidden := func(sel string) bool {
		var h bool
		if err := chromedp.Run(bctx, chromedp.Evaluate(fmt.Sprintf(`!!(document.querySelector(%q) || {}).hidden`, sel), &h)); err != nil {
			t.Fatal(err)
		}
		return h
	}
	open := func(path string) {
		t.Helper()
		url = "http://" + addr + path
		if err := chromedp.Run(bctx, chromedp.Navigate(url)); err != nil {
			t.Fatalf("open %s in Chromium: %v", url, err)
		}
	}
	open("/jobs")
	row := fmt.Sprintf(`tr.job[data-id=%q]`, id)
	wait(row+" td.duration", "the job's duration", func(s string) bool { return strings.HasSuffix(s, " s") || strings.HasSuffix(s, " min") })
	if s := text(row + " td.submitted"); s == "" || s == "–" {
		t.Errorf("the job's submitted column reads %q", s)
	}
	wait(fmt.Sprintf(`#chart-latency-svg circle[data-id=%q] title`, id), "the job's latency on the chart", func(s string) bool {
		return strings.Contains(s, id) && strings.Contains(s, "succeeded")
	})
	var ratePts string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`(document.querySelector("#chart-rate-svg polyline") || {getAttribute: () => ""}).getAttribute("points")`, &ratePts)); err != nil || strings.Count(ratePts, ",") < 60 {
		t.Errorf("the shards-a-second chart has points %q (%v); want one a minute of the hour", ratePts, err)
	}
	if !hidden("#workers-section") || !hidden("#epochs-section") || hidden("#jobs-section") {
		t.Errorf("the jobs page shows the wrong parts: workers hidden %v, epochs hidden %v, jobs hidden %v",
			hidden("#workers-section"), hidden("#epochs-section"), hidden("#jobs-section"))
	}
	screenshot(t, bctx, "dashboard-jobs-page.png")

	// The epochs page: the leading term with its leader and start.
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open("/epochs")
	wait(fmt.Sprintf(`#epochs tr[data-epoch="%d"]`, l.Epoch), "the leading term", func(s string) bool {
		return strings.Contains(s, l.ID) && strings.Contains(s, "leading") && strings.Contains(s, "so far")
	})
	if !hidden("#jobs-section") || !hidden("#job-detail") || hidden("#epochs-section") {
		t.Errorf("the epochs page shows the wrong parts")
	}
	if s := text("#nav a.current"); s != "epochs" {
		t.Errorf("the current page's link reads %q, want epochs", s)
	}
	open("/workers")
	wait("#workers tbody", "both workers", func(s string) bool {
		ms := c.Members()
		return len(ms) == 2 && strings.Contains(s, ms[0].ID) && strings.Contains(s, ms[1].ID)
	})
	open("/schedules")
	wait("#schedules-empty", "no schedules yet", func(s string) bool { return strings.Contains(s, "No schedules") })
	if !hidden("#workers-section") {
		t.Errorf("the schedules page shows the workers")
	}
}
