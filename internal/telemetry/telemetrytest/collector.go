// Package telemetrytest is an OTLP/HTTP trace collector for tests: it listens on 127.0.0.1 and
// keeps every span it receives.
package telemetrytest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, reduced to what tests assert.
type Span struct {
	Name     string
	TraceID  string // 32 hex digits
	SpanID   string
	ParentID string // empty for a root
	Service  string // the resource's service.name
	Instance string // the resource's service.instance.id
	Attrs    map[string]string
	Start    time.Time
	End      time.Time
}

// Collector receives OTLP/HTTP protobuf trace exports.
type Collector struct {
	URL string // base URL: give it as the OTLP endpoint

	srv   *http.Server
	mu    sync.Mutex
	spans []Span
	done  chan struct{}
}

// Start starts a collector on a free port of 127.0.0.1.
func Start() (*Collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Collector{URL: "http://" + ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.traces)
	c.srv = &http.Server{Handler: mux}
	go func() { defer close(c.done); _ = c.srv.Serve(ln) }()
	return c, nil
}

// Close stops the collector.
func (c *Collector) Close() error {
	err := c.srv.Close()
	<-c.done
	return err
}

// Spans returns a copy of every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

func (c *Collector) traces(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = http.MaxBytesReader(w, r.Body, 32<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans, err := Decode(data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.spans = append(c.spans, spans...)
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Decode decodes an OTLP ExportTraceServiceRequest (protobuf).
func Decode(data []byte) ([]Span, error) {
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		var service, instance string
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.GetKey() {
			case "service.name":
				service = kv.GetValue().GetStringValue()
			case "service.instance.id":
				instance = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Service: service, Instance: instance, Attrs: map[string]string{},
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						sp.Attrs[kv.GetKey()] = v.GetStringValue()
					default:
						sp.Attrs[kv.GetKey()] = fmtValue(v.GetIntValue())
					}
				}
				out = append(out, sp)
			}
		}
	}
	return out, nil
}

func fmtValue(n int64) string { return strconv.FormatInt(n, 10) }
