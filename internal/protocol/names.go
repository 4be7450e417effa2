package protocol

import (
	"encoding/hex"
	"strconv"
)

// Names are the NATS names of one cluster, all derived from its prefix (default "mapagg"). Every
// stream, subject and de-duplication id the cluster uses is built here and nowhere else.
//
//	streams   <PREFIX>_SHARDS, <PREFIX>_RESULTS, <PREFIX>_DEAD
//	subjects  <prefix>.shards.<job>, <prefix>.results.<job>, <prefix>.dead.<source>,
//	          <prefix>.<control subject> (core NATS hints, see the Ctl constants)
type Names struct {
	Prefix string
}

// NewNames returns the names for prefix.
func NewNames(prefix string) Names { return Names{Prefix: prefix} }

func (n Names) ShardStream() string  { return upper(n.Prefix) + "_SHARDS" }
func (n Names) ResultStream() string { return upper(n.Prefix) + "_RESULTS" }
func (n Names) DeadStream() string   { return upper(n.Prefix) + "_DEAD" }

// ShardSubject is the subject of job's shards; ShardSubject(">") matches every job's.
func (n Names) ShardSubject(job string) string { return n.Prefix + ".shards." + job }

// ResultSubject is the subject of job's results; ResultSubject(">") matches every job's.
func (n Names) ResultSubject(job string) string { return n.Prefix + ".results." + job }

// DeadSubject is the dead-letter subject of messages that came from source (queue, shards, results).
func (n Names) DeadSubject(source string) string { return n.Prefix + ".dead." + source }

// Control is the core-NATS subject of a control hint, e.g. Control(CtlReleased).
func (n Names) Control(subject string) string { return n.Prefix + "." + subject }

// Control subjects (core NATS, fire-and-forget hints; correctness never depends on them).
const (
	CtlReleased  = "ctl.released"  // the leader released the lease: followers acquire now
	CtlSubmitted = "ctl.submitted" // a job was enqueued: the leader polls the queue now
	CtlCancel    = "ctl.cancel"    // data = job id: the leader cancels it now
)

// ShardMsgID is the Nats-Msg-Id of shard index of job: a re-dispatch of the same shard within
// the stream's duplicate window (a new leader re-publishing the old one's last batch) adds nothing.
func ShardMsgID(job string, index int) string { return job + "/" + strconv.Itoa(index) }

// ResultMsgID is the Nats-Msg-Id of a result: a worker's retried publish of the same attempt adds
// nothing, while another attempt's result is a distinct message (the leader drops the duplicate).
func ResultMsgID(job string, index, attempt int) string {
	return job + "/" + strconv.Itoa(index) + "/" + strconv.Itoa(attempt)
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
		if c == '.' || c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// ValidateSubject is the core-NATS request subject on which the workers that have job type typ
// validate its parameters (one queue group, so one of them answers). A type name holding '.' is
// hex-encoded after a '=' (a character type names never hold), so that every type is exactly one
// subject token and no two types share a subject.
func (n Names) ValidateSubject(typ string) string {
	return n.Prefix + ".ctl.validate." + typeToken(typ)
}

// TypesSubject is the core-NATS request subject every worker answers with its id and job types.
func (n Names) TypesSubject() string { return n.Prefix + ".ctl.types" }

func typeToken(typ string) string {
	for i := 0; i < len(typ); i++ {
		if typ[i] == '.' {
			return "=" + hex.EncodeToString([]byte(typ))
		}
	}
	return typ
}
// Members is the core-NATS subject on which every worker announces itself (package membership).
func (n Names) Members() string { return n.Prefix + ".ctl.members" }

// Events is the core-NATS subject on which workers publish their election and coordinator events.
func (n Names) Events() string { return n.Prefix + ".ctl.events" }
