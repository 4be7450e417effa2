package node

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Retention is how long finished jobs are kept before the leader deletes them; 0 keeps them.
type Retention struct {
	Succeeded time.Duration // default 7 days
	Failed    time.Duration // failed and cancelled jobs; default 30 days
}

// DefaultRetention keeps succeeded jobs 7 days and failed or cancelled ones 30 days.
var DefaultRetention = Retention{Succeeded: 7 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}

// String is the flag form: "SUCCEEDED,FAILED".
func (r *Retention) String() string {
	if r == nil {
		return ""
	}
	return fmtDays(r.Succeeded) + "," + fmtDays(r.Failed)
}

// Set parses "DURATION" (both) or "SUCCEEDED,FAILED"; a duration may be given in days ("7d").
func (r *Retention) Set(s string) error {
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return fmt.Errorf("retention %q: give DURATION or SUCCEEDED,FAILED (e.g. 7d,30d; 0 keeps)", s)
	}
	var ds []time.Duration
	for _, p := range parts {
		d, err := parseDays(strings.TrimSpace(p))
		if err != nil || d < 0 {
			return fmt.Errorf("retention %q: %q is not a duration (e.g. 7d, 36h, 0 to keep)", s, p)
		}
		ds = append(ds, d)
	}
	r.Succeeded, r.Failed = ds[0], ds[len(ds)-1]
	return nil
}

func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return 0, err
		}
		return time.Duration(f * float64(24*time.Hour)), nil
	}
	return time.ParseDuration(s)
}

func fmtDays(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	if d == 0 {
		return "0"
	}
	return d.String()
}
