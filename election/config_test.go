package election

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfig_Validate_RefusesBadSettings(t *testing.T) {
	t.Parallel()
	good := func() Config {
		c := DefaultConfig()
		c.Identity = "host-1"
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("defaults with an identity: %v", err)
	}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // the message must name it
	}{
		{"empty identity", func(c *Config) { c.Identity = "" }, "Identity"},
		{"non-ascii identity", func(c *Config) { c.Identity = "höst" }, "Identity"},
		{"identity with newline", func(c *Config) { c.Identity = "a\nb" }, "Identity"},
		{"long identity", func(c *Config) { c.Identity = strings.Repeat("x", 257) }, "Identity"},
		{"upper-case container", func(c *Config) { c.Container = "Leader" }, "Container"},
		{"short container", func(c *Config) { c.Container = "ab" }, "Container"},
		{"double hyphen container", func(c *Config) { c.Container = "a--b" }, "Container"},
		{"trailing hyphen container", func(c *Config) { c.Container = "abc-" }, "Container"},
		{"empty container", func(c *Config) { c.Container = "" }, "Container"},
		{"empty blob", func(c *Config) { c.Blob = "" }, "Blob"},
		{"lease too short", func(c *Config) { c.LeaseDuration = 14 * time.Second }, "LeaseDuration"},
		{"lease too long", func(c *Config) { c.LeaseDuration = 61 * time.Second }, "LeaseDuration"},
		{"lease not whole seconds", func(c *Config) { c.LeaseDuration = 15500 * time.Millisecond }, "LeaseDuration"},
		{"renew not inside lease", func(c *Config) { c.RenewInterval = 7 * time.Second }, "RenewInterval"},
		{"renew equals lease", func(c *Config) { c.RenewInterval = 15 * time.Second }, "RenewInterval"},
		{"renew zero", func(c *Config) { c.RenewInterval = 0 }, "RenewInterval"},
		{"margin equals lease", func(c *Config) { c.SafetyMargin = 15 * time.Second }, "SafetyMargin"},
		{"margin above lease", func(c *Config) { c.SafetyMargin = 20 * time.Second }, "SafetyMargin"},
		{"negative margin", func(c *Config) { c.SafetyMargin = -time.Second }, "SafetyMargin"},
		{"retry zero", func(c *Config) { c.RetryInterval = 0 }, "RetryInterval"},
		{"retry too long", func(c *Config) { c.RetryInterval = 2 * time.Minute }, "RetryInterval"},
		{"jitter negative", func(c *Config) { c.Jitter = -0.1 }, "Jitter"},
		{"jitter above one", func(c *Config) { c.Jitter = 1.5 }, "Jitter"},
		{"jitter NaN", func(c *Config) { c.Jitter = math.NaN() }, "Jitter"},
		{"heartbeat zero", func(c *Config) { c.Heartbeats = &port{}; c.HeartbeatInterval = 0 }, "HeartbeatInterval"},
		{"heartbeat too long", func(c *Config) { c.Heartbeats = &port{}; c.HeartbeatInterval = time.Minute }, "HeartbeatInterval"},
		{"suspicion under 4 beats", func(c *Config) { c.Heartbeats = &port{}; c.SuspicionTimeout = 999 * time.Millisecond }, "SuspicionTimeout"},
		{"suspicion zero", func(c *Config) { c.Heartbeats = &port{}; c.SuspicionTimeout = 0 }, "SuspicionTimeout"},
		{"suspicion not below lease", func(c *Config) { c.Heartbeats = &port{}; c.SuspicionTimeout = 13 * time.Second }, "SuspicionTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate accepted %+v", c)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestConfig_Validate_AcceptsEdges(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Identity: "a", Container: "abc", Blob: "l", LeaseDuration: 15 * time.Second, RenewInterval: 6500 * time.Millisecond,
			RetryInterval: 10 * time.Millisecond, Jitter: 1, SafetyMargin: 2 * time.Second},
		{Identity: "a", Container: strings.Repeat("a", 63), Blob: "x/y", LeaseDuration: 60 * time.Second, RenewInterval: 20 * time.Second,
			RetryInterval: time.Minute, Jitter: 0, SafetyMargin: time.Second},
		{Identity: "a", Container: "abc", Blob: "l", LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second,
			RetryInterval: time.Second, SafetyMargin: 2 * time.Second,
			Heartbeats: &port{}, HeartbeatInterval: 10 * time.Millisecond, SuspicionTimeout: 40 * time.Millisecond},
		{Identity: "a", Container: "abc", Blob: "l", LeaseDuration: 60 * time.Second, RenewInterval: 5 * time.Second,
			RetryInterval: time.Second, SafetyMargin: 2 * time.Second,
			Heartbeats: &port{}, HeartbeatInterval: 10 * time.Second, SuspicionTimeout: 40 * time.Second},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", c, err)
		}
	}
}

func TestNew_AppliesDefaultsToZeroFields(t *testing.T) {
	t.Parallel()
	e, err := New(&AzureAPI{}, Config{Identity: "me", LeaseDuration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := e.Config()
	if c.Container != "leader" || c.Blob != "lease" || c.RenewInterval != time.Second ||
		c.RetryInterval != time.Second || c.Jitter != 0.25 || c.SafetyMargin != 2*time.Second || c.Logger == nil ||
		c.HeartbeatInterval != 250*time.Millisecond || c.SuspicionTimeout != 1400*time.Millisecond {
		t.Errorf("defaults not applied: %+v", c)
	}
	if _, err := New(&AzureAPI{}, Config{}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Identity") {
		t.Errorf("New without identity: %v", err)
	}
	if _, err := New(nil, Config{Identity: "me"}); err == nil {
		t.Error("New(nil api) accepted")
	}
}
