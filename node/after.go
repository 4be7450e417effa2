package node

import (
	"strings"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
)

// registerAfter adds submit's --after and --retries.
func (f *submitFlags) registerAfter() {
	f.fs.StringVar(&f.after, "after", "", "JOB[,JOB…]: start once every one of these jobs succeeded (the job waits; it fails if one fails or is cancelled)")
	f.fs.IntVar(&f.retries, "retries", 0, "submit the job again if it fails, up to N times, with backoff (0 to 10)")
}

// checkAfter refuses a bad --after or --retries before anything is read or written.
func (f *submitFlags) checkAfter() error {
	if f.retries < 0 || f.retries > protocol.MaxRetries {
		return usageErr("--retries %d: use 0 to %d", f.retries, protocol.MaxRetries)
	}
	ids := f.afterIDs()
	if len(ids) > protocol.MaxAfter {
		return usageErr("--after names %d jobs, the limit is %d", len(ids), protocol.MaxAfter)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if err := protocol.CheckID(id); err != nil {
			return usageErr("--after: %v", err)
		}
		if seen[id] {
			return usageErr("--after names job %s twice", id)
		}
		seen[id] = true
	}
	return nil
}

func (f *submitFlags) afterIDs() []string {
	if strings.TrimSpace(f.after) == "" {
		return nil
	}
	var ids []string
	for _, id := range strings.Split(f.after, ",") {
		ids = append(ids, strings.TrimSpace(id))
	}
	return ids
}

func (f *submitFlags) submitOptions() []client.SubmitOption {
	return []client.SubmitOption{client.WithAfter(f.afterIDs()...), client.WithRetries(f.retries)}
}
