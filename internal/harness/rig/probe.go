package rig

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// Readyz is the /readyz status of the worker at addr (0: no answer).
func Readyz(addr string) int {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// WaitReady waits up to within for the worker at addr to answer /readyz with want.
func WaitReady(ctx context.Context, addr string, want int, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within && ctx.Err() == nil {
		if Readyz(addr) == want {
			return time.Since(start), true
		}
		_ = Sleep(ctx, 100*time.Millisecond)
	}
	return time.Since(start), false
}

// SumMetric adds a counter over c's running workers' /metrics.
func SumMetric(c *cluster.Cluster, name string) float64 {
	var sum float64
	cl := http.Client{Timeout: 3 * time.Second}
	for _, id := range c.Running() {
		addr := c.HTTPAddr(id)
		if addr == "" {
			continue
		}
		resp, err := cl.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					sum += x
				}
			}
		}
	}
	return sum
}
