//go:build !linux

package precise

import (
	"context"
	"time"
)

func kernelSleep(context.Context, time.Duration) (bool, error) { return false, nil }
