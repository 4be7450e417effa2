package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/telemetry/telemetrytest"
)

func TestNew_OffWithoutEndpoint(t *testing.T) {
	t.Setenv(telemetry.EnvEndpoint, "")
	t.Setenv(telemetry.EnvTracesEndpoint, "")
	tr, err := telemetry.New(context.Background(), telemetry.Config{})
	if err != nil || tr != nil {
		t.Fatalf("New without an endpoint = %v, %v; want nil, nil", tr, err)
	}
	ctx := telemetry.NewContext(context.Background(), tr)
	if telemetry.FromContext(ctx) != nil {
		t.Fatal("a context of a nil Tracing carries one")
	}
	telemetry.Start(ctx, "job-1", "plan").End() // does nothing, must not panic
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNew_SDKDisabled(t *testing.T) {
	t.Setenv(telemetry.EnvEndpoint, "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tr, err := telemetry.New(context.Background(), telemetry.Config{}); tr != nil || err != nil {
		t.Fatalf("New with OTEL_SDK_DISABLED = %v, %v; want nil, nil", tr, err)
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, s := range []string{"http://127.0.0.1:4318", "https://otel.example:4318/v1/traces"} {
		if err := telemetry.CheckEndpoint(s); err != nil {
			t.Errorf("CheckEndpoint(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"127.0.0.1:4318", "ftp://x", "http://", "http://user:secret@:1"} {
		err := telemetry.CheckEndpoint(s)
		if !errors.Is(err, telemetry.ErrBadEndpoint) {
			t.Errorf("CheckEndpoint(%q) = %v, want ErrBadEndpoint", s, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckEndpoint(%q) error shows the password: %v", s, err)
		}
	}
}

func TestSpans_OneTraceAJob(t *testing.T) {
	col, err := telemetrytest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	ctx := context.Background()
	tr, err := telemetry.New(ctx, telemetry.Config{Endpoint: col.URL, Instance: "w1"})
	if err != nil || tr == nil {
		t.Fatalf("New = %v, %v", tr, err)
	}
	ctx = telemetry.NewContext(ctx, tr)
	const job = "20261128-120000-abcdef01"
	submitted := time.Now().Add(-time.Second)
	telemetry.Record(ctx, job, "submit", submitted, nil)
	telemetry.Start(ctx, job, "plan").End()
	telemetry.Start(ctx, job, "map", attribute.Int("mapagg.shard", 3)).EndErr(errors.New("boom"))
	telemetry.Start(ctx, "other-job", "plan").End()
	telemetry.Finish(ctx, job, submitted, "succeeded", "").End()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	byName := map[string]telemetrytest.Span{}
	for _, s := range col.Spans() {
		if s.Attrs["mapagg.job"] == job {
			byName[s.Name] = s
		}
	}
	want := telemetry.TraceID(job)
	jobSpan, ok := byName["job"]
	if !ok {
		t.Fatalf("no job span among %v", col.Spans())
	}
	if jobSpan.ParentID != "" || jobSpan.TraceID != want {
		t.Errorf("job span: trace %s parent %q; want trace %s, a root", jobSpan.TraceID, jobSpan.ParentID, want)
	}
	for _, name := range []string{"submit", "plan", "map", "finish"} {
		s, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("no %s span", name)
		case s.TraceID != want:
			t.Errorf("%s span in trace %s, want %s", name, s.TraceID, want)
		case s.ParentID != jobSpan.SpanID:
			t.Errorf("%s span's parent %s, want the job span %s", name, s.ParentID, jobSpan.SpanID)
		case s.Service != "mapagg" || s.Instance != "w1":
			t.Errorf("%s span's resource: %q %q", name, s.Service, s.Instance)
		}
	}
	if byName["map"].Attrs["mapagg.shard"] != "3" {
		t.Errorf("map span attributes %v", byName["map"].Attrs)
	}
	if telemetry.TraceID("other-job") == want {
		t.Error("two jobs share a trace id")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = telemetrytest.Decode(data)
	})
}
