package membership

import (
	"log/slog"
	"testing"
)

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }
