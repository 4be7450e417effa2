package node

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/why"
)

// whyWindow is how long `worker status JOB` collects the workers' answers about a job's tasks.
const whyWindow = 300 * time.Millisecond

// explainJob says what job st waits for (internal/why): nil for a job that ended. It asks the
// running workers over NATS for the job's tasks; without NATS the answer says so.
func (n *Node) explainJob(ctx context.Context, c *common, st *client.Status) *why.Answer {
	if st.State.Terminal() {
		return nil
	}
	cl, done, err := n.client(ctx, c, true)
	if err != nil {
		return &why.Answer{Job: st.ID, State: st.State, At: time.Now().UTC(),
			Reasons: []why.Reason{{Kind: "no_worker", Text: "cannot tell: " + protocol.Redact(err.Error())}}}
	}
	defer done()
	var nc *nats.Conn
	if v, ok := cl.Validator.(*clusterask.Validator); ok {
		nc = v.Conn
	}
	a := &why.Asker{Jobs: cl, Conn: nc, Subject: why.Subject(c.streamPrefix), Window: whyWindow}
	ans, err := a.Explain(ctx, st.ID)
	if err != nil {
		return &why.Answer{Job: st.ID, State: st.State, At: time.Now().UTC(),
			Reasons: []why.Reason{{Kind: "no_worker", Text: "cannot tell: " + protocol.Redact(err.Error())}}}
	}
	if nc == nil {
		ans.Reasons = append(ans.Reasons, why.Reason{Kind: "no_worker", Text: "NATS is unreachable: the workers' tasks are unknown (check --nats-url)"})
	}
	return ans
}

// printWhy prints an answer's reasons under the job's status line.
func printWhy(w io.Writer, ans *why.Answer) {
	if ans == nil {
		return
	}
	if len(ans.Reasons) == 0 {
		fmt.Fprintln(w, "waits for: nothing known (it is being planned or about to end)")
		return
	}
	fmt.Fprintln(w, "waits for:")
	for _, r := range ans.Reasons {
		fmt.Fprintf(w, "  - %s\n", r.Text)
	}
}

// jobWithWhy is `worker status JOB --json`: the job's status and, unless it ended, "why".
type jobWithWhy struct {
	*client.Status
	Why *why.Answer `json:"why,omitempty"`
}
