package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Env names the standard variables that turn tracing on.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// ErrBadEndpoint matches every error about a malformed OTLP endpoint.
var ErrBadEndpoint = errors.New("bad OTLP endpoint")

// Config configures a process's tracing.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; "/v1/traces"
	// is added to its path unless it ends with it. Empty: the OTEL_EXPORTER_OTLP_* variables decide, and
	// without them tracing is off.
	Endpoint string
	// Service is the service.name of the spans (default "mapagg"; OTEL_SERVICE_NAME wins).
	Service string
	// Instance is the service.instance.id: the worker's id, or empty for a client.
	Instance string
	// Logger receives export failures (default: discarded).
	Logger *slog.Logger
}

// Tracing is a process's tracer provider. A nil *Tracing is off: its methods do nothing.
type Tracing struct {
	tp  *sdktrace.TracerProvider
	tr  trace.Tracer
	ids *jobIDs
}

// Enabled reports whether cfg (with the environment) turns tracing on.
func (c Config) Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return c.Endpoint != "" || os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != ""
}

// CheckEndpoint says what is wrong with an --otlp-endpoint value, or returns nil.
func CheckEndpoint(s string) error {
	_, err := tracesURL(s)
	return err
}

// tracesURL is the traces URL of a base endpoint URL.
func tracesURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("%w %q: give the collector's URL, e.g. http://127.0.0.1:4318", ErrBadEndpoint, redactURL(s))
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces" // as for OTEL_EXPORTER_OTLP_ENDPOINT
	}
	return u.String(), nil
}

// redactURL drops a URL's user information and query (where credentials hide).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}

// New starts tracing as cfg says, or returns nil (off) when no endpoint is configured. Nothing
// is sent until a span ends; an unreachable collector costs failed exports, logged, never a job.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u, err := tracesURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cmpOr(cfg.Service, "mapagg"))}
	if cfg.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Instance))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	ids := &jobIDs{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(ids))
	if cfg.Logger != nil {
		cfg.Logger.Info("tracing on", "otlp_endpoint", redactURL(cmpOr(cfg.Endpoint, os.Getenv(EnvTracesEndpoint), os.Getenv(EnvEndpoint))))
	}
	return &Tracing{tp: tp, tr: tp.Tracer("github.com/mapagg/mapagg"), ids: ids}, nil
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

type ctxKey struct{}

// NewContext returns ctx carrying t: Start under it (or a context made from it) records spans.
func NewContext(ctx context.Context, t *Tracing) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the *Tracing ctx carries, or nil.
func FromContext(ctx context.Context) *Tracing {
	t, _ := ctx.Value(ctxKey{}).(*Tracing)
	return t
}

// TraceID is the id of job's trace (32 hex digits): the same in every process.
func TraceID(job string) string { return jobTrace(job).String() }

func jobTrace(job string) trace.TraceID {
	h := sha256.Sum256([]byte("mapagg/trace/" + job))
	var id trace.TraceID
	copy(id[:], h[:16])
	return id
}

func jobSpan(job string) trace.SpanID {
	h := sha256.Sum256([]byte("mapagg/span/" + job))
	var id trace.SpanID
	copy(id[:], h[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// JobContext is the span context of job's "job" span, the parent of all its other spans.
func JobContext(job string) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: jobTrace(job), SpanID: jobSpan(job),
		TraceFlags: trace.FlagsSampled, Remote: true})
}

// Span is a started span; the zero Span (tracing off) does nothing.
type Span struct {
	s     trace.Span
	after func()
}

// End ends the span.
func (s Span) End() { s.EndErr(nil) }

// EndErr ends the span, marking it failed with err's text when err is not nil.
func (s Span) EndErr(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.SetStatus(codes.Error, clip(err.Error()))
	}
	s.s.End()
	if s.after != nil {
		s.after()
	}
}

// Set adds attributes to the span.
func (s Span) Set(attrs ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(attrs...)
	}
}

// Start starts span name of job's trace, a child of its "job" span, if ctx carries tracing.
func Start(ctx context.Context, job, name string, attrs ...attribute.KeyValue) Span {
	t := FromContext(ctx)
	if t == nil || job == "" {
		return Span{}
	}
	return t.start(ctx, job, name, time.Time{}, attrs)
}

func (t *Tracing) start(ctx context.Context, job, name string, at time.Time, attrs []attribute.KeyValue) Span {
	pctx := trace.ContextWithRemoteSpanContext(ctx, JobContext(job))
	opts := []trace.SpanStartOption{trace.WithAttributes(append(attrs, attribute.String("mapagg.job", job))...)}
	if !at.IsZero() {
		opts = append(opts, trace.WithTimestamp(at))
	}
	_, s := t.tr.Start(pctx, name, opts...)
	return Span{s: s}
}

// Record records span name of job's trace that began at start and ends now.
func Record(ctx context.Context, job, name string, start time.Time, err error, attrs ...attribute.KeyValue) {
	t := FromContext(ctx)
	if t == nil || job == "" {
		return
	}
	t.start(ctx, job, name, start, attrs).EndErr(err)
}

// Finish starts the "finish" span of job, which ended in state (why: its error, if any). Its
// End also records the "job" span, from submitted (when known) to then.
func Finish(ctx context.Context, job string, submitted time.Time, state, why string) Span {
	t := FromContext(ctx)
	if t == nil || job == "" {
		return Span{}
	}
	outcome := attribute.String("mapagg.state", state)
	s := t.start(ctx, job, "finish", time.Time{}, []attribute.KeyValue{outcome})
	s.after = func() {
		start := submitted
		if start.IsZero() {
			start = time.Now()
		}
		// The job span's ids are the job's own (JobContext): it is a root, and the
		// other spans of the job name it as their parent.
		jctx := context.WithValue(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), forcedKey{}, job)
		_, js := t.tr.Start(jctx, "job", trace.WithNewRoot(), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("mapagg.job", job), outcome))
		if why != "" {
			js.SetStatus(codes.Error, clip(why))
		}
		js.End()
	}
	return s
}

// clip bounds a status text (an error may quote user input).
func clip(s string) string {
	if len(s) > 512 {
		return s[:512] + "…"
	}
	return s
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// forcedKey marks the context of a "job" span: its ids are the job's.
type forcedKey struct{}

// jobIDs makes random ids, except for a "job" span, whose ids come from its job id.
type jobIDs struct{}

var _ sdktrace.IDGenerator = (*jobIDs)(nil)

func (g *jobIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if job, ok := ctx.Value(forcedKey{}).(string); ok {
		return jobTrace(job), jobSpan(job)
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		randRead(tid[:])
	}
	for !sid.IsValid() {
		randRead(sid[:])
	}
	return tid, sid
}

func (g *jobIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		randRead(sid[:])
	}
	return sid
}

// randRead fills b with random bytes (span ids need to be unique, not secret).
func randRead(b []byte) {
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
}

// StartIn is Start that also returns ctx carrying the span (for Rename).
func StartIn(ctx context.Context, job, name string, attrs ...attribute.KeyValue) (context.Context, Span) {
	s := Start(ctx, job, name, attrs...)
	if s.s == nil {
		return ctx, s
	}
	return trace.ContextWithSpan(ctx, s.s), s
}

// Rename renames the span ctx carries (once what a task is has been decoded).
func Rename(ctx context.Context, name string) {
	if FromContext(ctx) != nil {
		trace.SpanFromContext(ctx).SetName(name)
	}
}

// Int is a span attribute "mapagg.<key>" with an integer value.
func Int(key string, v int) attribute.KeyValue { return attribute.Int("mapagg."+key, v) }

// Str is a span attribute "mapagg.<key>" with a string value.
func Str(key, v string) attribute.KeyValue { return attribute.String("mapagg."+key, v) }
