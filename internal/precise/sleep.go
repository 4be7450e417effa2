package precise

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends (returning ctx.Err()). d ≤ 0 returns at once (ctx.Err()).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	if ok, err := kernelSleep(ctx, d); ok {
		return err
	}
	return TimerSleep(ctx, d-time.Since(start))
}

// TimerSleep is Sleep with a time.Timer: how the runtime sleeps (for comparisons).
func TimerSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
