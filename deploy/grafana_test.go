package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/observe"
	"github.com/mapagg/mapagg/internal/worker"
)

// exportedMetrics are the metric families a worker serves on /metrics, every source attached and
// every histogram observed once (a labelled histogram appears only then).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := observe.NewMetrics("test", observe.Sources{
		Worker:       func() worker.Stats { return worker.Stats{} },
		Elector:      func() election.Stats { return election.Stats{} },
		QueuedShards: func(context.Context) (uint64, error) { return 0, nil },
	})
	m.MapStarted("pi")
	m.MapFinished("pi", time.Millisecond, nil)
	m.CheckpointWritten(time.Millisecond, 100, nil)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

// TestGrafanaDashboard_QueriesNameExportedMetrics holds deploy/grafana-dashboard.json to the
// binary: every panel has a query, and every metric a query names is one a worker exports.
func TestGrafanaDashboard_QueriesNameExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard %q has %d panels", dash.Title, len(dash.Panels))
	}
	exported := exportedMetrics(t)
	metric := regexp.MustCompile(`\b(?:mapagg|go|process)_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metric.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no worker metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q: %s is not a metric the worker exports", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	// The dashboard covers the product's own metrics.
	for name := range exported {
		if strings.HasPrefix(name, "mapagg_") && !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}
