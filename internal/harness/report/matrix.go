package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// VerdictOK is a fault's verdict when nothing went wrong.
const VerdictOK = "ok"

// Matrix is the fault matrix's JSON report. Durations are seconds.
type Matrix struct {
	rig.Header
	Settings    MatrixSettings `json:"settings"`
	References  []Reference    `json:"references"`
	Results     []FaultResult  `json:"results"`
	LeftRunning []string       `json:"left_running,omitempty"` // processes the run started that outlived it
	Incomplete  string         `json:"incomplete,omitempty"`
	Failed      int            `json:"failed"` // faults whose verdict is not ok
}

// MatrixSettings are what shaped the fault matrix.
type MatrixSettings struct {
	Workers       int     `json:"workers"`
	Concurrency   int     `json:"concurrency"`
	LeaseS        float64 `json:"lease_s"`
	ShardTimeoutS float64 `json:"shard_timeout_s"`
	At            float64 `json:"fault_at_fraction"`
	DeadlineS     float64 `json:"deadline_after_heal_s"`
	CancelWithinS float64 `json:"cancel_within_s"`
}

// Reference is a job's makespan without a fault.
type Reference struct {
	Job       string  `json:"job"`
	MakespanS float64 `json:"makespan_s"`
}

// FaultResult is one fault's row.
type FaultResult struct {
	Fault string `json:"fault"`
	What  string `json:"what"`
	Job   string `json:"job"`
	JobID string `json:"job_id,omitempty"`
	// Verdict is "ok" or what went wrong (WRONG, FAILED, STUCK, LOST, SLOW, NOT CANCELLED,
	// NOT DEAD-LETTERED, NOT DEPOSED, LEFT BEHIND, HARNESS ERROR, INTERRUPTED); Problem says more.
	Verdict    string   `json:"verdict"`
	Problem    string   `json:"problem,omitempty"`
	State      string   `json:"state,omitempty"`
	Exact      bool     `json:"exact"`                 // the exact answer (cancelled, for the cancel fault)
	InjectedAt string   `json:"injected_at,omitempty"` // shards merged when the fault hit
	Merged     string   `json:"merged,omitempty"`      // shards merged at the end
	HealedS    float64  `json:"healed_s"`              // when the fault was healed, from the submit
	MakespanS  float64  `json:"makespan_s,omitempty"`
	ReferenceS float64  `json:"reference_s,omitempty"`
	TimeLostS  *float64 `json:"time_lost_s,omitempty"`
	// CancelAfterElectionS: cancel-failover only, how long after the new leader's election the
	// job ended.
	CancelAfterElectionS *float64 `json:"cancel_after_election_s,omitempty"`
	// LeaderChanges counts the elections the workers announced from the injection to the end, or
	// what the fault counted itself from the lease's epoch (the trust faults).
	LeaderChanges int      `json:"leader_changes"`
	LeftBehind    []string `json:"left_behind,omitempty"`
	Notes         []string `json:"notes,omitempty"`
}

// Tally counts the failed faults.
func (rep *Matrix) Tally() {
	rep.Failed = 0
	for _, r := range rep.Results {
		if r.Verdict != VerdictOK {
			rep.Failed++
		}
	}
}

// OK reports whether every fault passed and nothing is left running.
func (rep *Matrix) OK() bool {
	return rep.Incomplete == "" && rep.Failed == 0 && len(rep.LeftRunning) == 0
}

// WriteMarkdown writes the table of faults, then each fault's notes and problem.
func (rep *Matrix) WriteMarkdown(w io.Writer) {
	m := rig.Markdown{W: w}
	p := m.P
	kind := "full matrix"
	if rep.Quick {
		kind = "quick"
	}
	s := rep.Settings
	p("# Fault matrix (%s)", kind)
	m.Para("%s, %d CPUs, %s. %d workers, concurrency %d, lease %.0f s, shard timeout %.0f s; faults at %.0f%% of the shards; "+
		"stuck = not ended %.0f s after the fault was healed. Took %.0f s.",
		rep.StartedAt.Format("2006-01-02 15:04 UTC"), rep.Machine.CPUs, rep.Machine.Go, s.Workers, s.Concurrency, s.LeaseS,
		s.ShardTimeoutS, 100*s.At, s.DeadlineS, rep.DurationS)
	if len(rep.References) > 0 {
		var refs []string
		for _, r := range rep.References {
			refs = append(refs, fmt.Sprintf("%s %.2f s", r.Job, r.MakespanS))
		}
		m.Para("No-fault reference makespans: %s.", strings.Join(refs, "; "))
	}
	if rep.Incomplete != "" {
		m.Para("**Incomplete:** %s", rep.Incomplete)
	}
	p("")
	m.Table("fault", "verdict", "result exact?", "time lost", "leader changes", "anything left behind")
	for _, r := range rep.Results {
		exact := "yes"
		if !r.Exact {
			exact = "**no**"
			if r.State != "" {
				exact += " (" + r.State + ")"
			}
		}
		lost := "–"
		switch {
		case r.TimeLostS != nil:
			lost = fmt.Sprintf("%+.1f s", *r.TimeLostS)
		case r.CancelAfterElectionS != nil:
			lost = fmt.Sprintf("cancelled %.2f s after election", *r.CancelAfterElectionS)
		}
		left := "nothing"
		if len(r.LeftBehind) > 0 {
			left = rig.Cell(strings.Join(r.LeftBehind, "; "))
		}
		verdict := r.Verdict
		if verdict != VerdictOK {
			verdict = "**" + verdict + "**"
		}
		p("| %s | %s | %s | %s | %d | %s |", r.Fault, verdict, exact, lost, r.LeaderChanges, left)
	}
	if len(rep.LeftRunning) > 0 {
		m.Para("**Still running at the end:** %s", strings.Join(rep.LeftRunning, "; "))
	}
	m.Para("%d of %d faults failed.", rep.Failed, len(rep.Results))
	p("")
	for _, r := range rep.Results {
		p("- **%s** (%s; job %s, fault at %s merged, healed at %.1f s)", r.Fault, r.What, r.JobID, r.InjectedAt, r.HealedS)
		for _, n := range r.Notes {
			p("  - %s", rig.Cell(n))
		}
		if r.Problem != "" {
			p("  - problem: %s", rig.Cell(r.Problem))
		}
	}
}
