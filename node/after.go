package node

import (
	"strings"

	"github.com/mapagg/mapagg/client"
)

// registerAfter adds submit's --after and --retries.
func (f *submitFlags) registerAfter() {
	f.fs.StringVar(&f.after, "after", "", "JOB[,JOB…]: start once every one of these jobs succeeded (the job waits; it fails if one fails or is cancelled)")
	f.fs.IntVar(&f.retries, "retries", 0, "submit the job again if it fails, up to N times, with backoff (0 to 10)")
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
