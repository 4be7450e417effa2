package precise

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSleep_NeverReturnsEarly(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range []time.Duration{time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond, 5 * time.Millisecond} {
				for range 20 {
					start := time.Now()
					if err := Sleep(context.Background(), d); err != nil {
						t.Errorf("Sleep(%v): %v", d, err)
						return
					}
					if got := time.Since(start); got < d {
						t.Errorf("Sleep(%v) returned after %v", d, got)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestSleep_CancelEndsTheSleep(t *testing.T) {
	for range 3 { // a cancelled sleep's timerfd is not reused: the next sleeps still sleep
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		err := Sleep(ctx, time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Sleep: %v, want context.Canceled", err)
		}
		if got := time.Since(start); got > 30*time.Second {
			t.Fatalf("cancelled Sleep returned after %v", got)
		}
		start = time.Now()
		if err := Sleep(context.Background(), 3*time.Millisecond); err != nil || time.Since(start) < 3*time.Millisecond {
			t.Fatalf("Sleep after a cancelled one: %v after %v", err, time.Since(start))
		}
	}
}

func TestSleep_DoneContextOrZeroDuration(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a done ctx: %v", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(0) on a done ctx: %v", err)
	}
	if err := Sleep(context.Background(), -time.Second); err != nil {
		t.Errorf("Sleep(-1s): %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := Sleep(ctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep past the ctx deadline: %v", err)
	}
}

func TestTimerSleep(t *testing.T) {
	start := time.Now()
	if err := TimerSleep(context.Background(), 2*time.Millisecond); err != nil || time.Since(start) < 2*time.Millisecond {
		t.Errorf("TimerSleep: %v after %v", err, time.Since(start))
	}
}

func BenchmarkSleep2ms(b *testing.B) {
	for _, k := range []struct {
		name string
		f    func(context.Context, time.Duration) error
	}{{"precise", Sleep}, {"timer", TimerSleep}} {
		b.Run(k.name, func(b *testing.B) {
			var over time.Duration
			for b.Loop() {
				start := time.Now()
				_ = k.f(context.Background(), 2*time.Millisecond)
				over += time.Since(start) - 2*time.Millisecond
			}
			b.ReportMetric(float64(over.Microseconds())/float64(b.N), "µs-late/op")
		})
	}
}
