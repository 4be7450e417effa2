package lifecycle

import (
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
)

func TestRetry_Backoff(t *testing.T) {
	tm := &Lifecycle{cfg: core.Config{RetryBackoff: 5 * time.Second}}
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{1, 5 * time.Second}, {2, 10 * time.Second}, {3, 20 * time.Second}, {10, maxRetryBackoff}} {
		if got := tm.retryBackoff(c.attempt); got != c.want {
			t.Errorf("attempt %d: %v, want %v", c.attempt, got, c.want)
		}
	}
}
