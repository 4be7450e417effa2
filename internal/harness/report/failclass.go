package report

import (
	"io"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// FailClass is one failure class's runs and their distributions. Times are seconds from the
// fault.
type FailClass struct {
	Class string `json:"class"`
	What  string `json:"what"`
	Env   string `json:"worker_env,omitempty"`
	Runs  int    `json:"runs"`
	Exact int    `json:"exact"`
	// LeaderChanges over every run; a class without a takeover must have none.
	LeaderChanges int `json:"leader_changes"`
	// OldWrites: checkpoints of a deposed leader read after its successor's, over every run.
	OldWrites int `json:"old_leader_writes_after_break"`
	// ToLeader: fault → another worker elected. ToFirstMerge: fault → its first merge (or, in
	// a class without a takeover, → the first checkpoint with more merged than 0.5 s after it).
	ToLeader     rig.Dist `json:"to_leader_s"`
	ToFirstMerge rig.Dist `json:"to_first_merge_s"`
	// Detect: fault → a follower's no_responders or suspected event; Break: → its broke_lease.
	Detect rig.Dist `json:"detect_s"`
	Break  rig.Dist `json:"break_s"`
	// Probe: fault → a follower's first probe of the silent term (its probing event).
	Probe rig.Dist `json:"probe_s"`
	// StreamLeader (class-nats-node): node kill → the results stream has a new Raft leader.
	StreamLeader rig.Dist   `json:"stream_leader_s"`
	ByProbe      int        `json:"by_probe"` // takeovers confirmed by no responders
	Results      []ClassRun `json:"results"`
}

// ClassRun is one job with one fault.
type ClassRun struct {
	N             int     `json:"n"`
	Job           string  `json:"job"`
	Victim        string  `json:"victim"`
	Epoch         uint64  `json:"epoch"`
	Done          int     `json:"done"` // merged at the fault
	NewLeader     string  `json:"new_leader,omitempty"`
	NewEpoch      uint64  `json:"new_epoch,omitempty"`
	Path          string  `json:"path,omitempty"` // no_responders, suspected
	ProbeS        float64 `json:"probe_s,omitempty"`
	DetectS       float64 `json:"detect_s,omitempty"`
	BreakS        float64 `json:"break_s,omitempty"`
	ToLeaderS     float64 `json:"to_leader_s,omitempty"`
	ToFirstMergeS float64 `json:"to_first_merge_s,omitempty"`
	StreamLeaderS float64 `json:"stream_leader_s,omitempty"`
	HealedS       float64 `json:"healed_s,omitempty"`
	// OldWrites counts checkpoints of the victim's epoch read after one of the new leader's:
	// writes of the deposed leader after the break (fencing makes it 0).
	OldWrites     int     `json:"old_leader_writes_after_break"`
	LeaderChanges int     `json:"leader_changes"`
	MakespanS     float64 `json:"makespan_s"`
	Exact         bool    `json:"exact"`
	Error         string  `json:"error,omitempty"`
}

// Summarize fills the distributions from the runs.
func (fc *FailClass) Summarize() {
	var toLeader, toMerge, detect, brk, stream, probe []float64
	for _, r := range fc.Results {
		fc.Runs++
		if r.Exact {
			fc.Exact++
		}
		fc.LeaderChanges += r.LeaderChanges
		fc.OldWrites += r.OldWrites
		if r.NewEpoch != 0 {
			toLeader = append(toLeader, r.ToLeaderS)
		}
		if r.ToFirstMergeS > 0 {
			toMerge = append(toMerge, r.ToFirstMergeS)
		}
		if r.Path != "" {
			detect = append(detect, r.DetectS)
		}
		if r.Path == string(election.EventNoResponders) {
			fc.ByProbe++
		}
		if r.BreakS > 0 {
			brk = append(brk, r.BreakS)
		}
		if r.ProbeS > 0 {
			probe = append(probe, r.ProbeS)
		}
		if r.StreamLeaderS > 0 {
			stream = append(stream, r.StreamLeaderS)
		}
	}
	fc.ToLeader, fc.ToFirstMerge, fc.Detect = rig.Summarize(toLeader), rig.Summarize(toMerge), rig.Summarize(detect)
	fc.Break, fc.StreamLeader, fc.Probe = rig.Summarize(brk), rig.Summarize(stream), rig.Summarize(probe)
}

// WriteFailClasses writes the failure classes' table.
func WriteFailClasses(w io.Writer, classes []FailClass) {
	if len(classes) == 0 {
		return
	}
	m := rig.Markdown{W: w}
	p, d := m.P, rig.P50P90
	m.Section("Takeover by failure class")
	p("Seconds from the fault, p50 / p90. First merge: the new leader's; without a takeover, the first checkpoint with more merged than 0.5 s after the fault (checkpoints every 0.2 s, read every 50 ms).")
	p("")
	m.Table("class", "what", "runs", "exact", "leader changes", "→ first probe", "→ detected", "→ lease broken", "→ new leader", "→ first merge",
		"JetStream election", "probe path", "old leader's writes after the break")
	for _, fc := range classes {
		what := fc.What
		if fc.Env != "" {
			what += " (" + fc.Env + ")"
		}
		p("| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %d | %d |", fc.Class, what, fc.Runs, fc.Exact, fc.LeaderChanges,
			d(fc.Probe), d(fc.Detect), d(fc.Break), d(fc.ToLeader), d(fc.ToFirstMerge), d(fc.StreamLeader), fc.ByProbe, fc.OldWrites)
	}
}
