package protocol

import (
	"strconv"
)

// Names are the NATS names of one cluster, all derived from its prefix (default "mapagg"). Every
// stream, subject and de-duplication id the cluster uses is built here and nowhere else.
//
//	streams   <PREFIX>_SHARDS, <PREFIX>_RESULTS, <PREFIX>_DEAD
//	subjects  <prefix>.shards.<type>.<job>, <prefix>.results.<job>, <prefix>.dead.<source>,
//	          <prefix>.<control subject> (core NATS hints, see the Ctl constants)
type Names struct {
	Prefix string
}

// NewNames returns the names for prefix.
func NewNames(prefix string) Names { return Names{Prefix: prefix} }

func (n Names) ShardStream() string  { return upper(n.Prefix) + "_SHARDS" }
func (n Names) ResultStream() string { return upper(n.Prefix) + "_RESULTS" }
func (n Names) DeadStream() string   { return upper(n.Prefix) + "_DEAD" }

// ShardSubject is the filter that matches job's shards, whatever their type (for a purge or an
// observer); ShardSubject(">") matches every shard. Shards are published on ShardTypeSubject.
func (n Names) ShardSubject(job string) string { return n.Prefix + ".shards.*." + job }

// ShardTypeSubject is the subject a shard of job, of job type typ, is published on. The type is a
// subject token so that each type has its own consumer: a worker pulls only the types it has, and
// during a rolling upgrade a worker that lacks a type never receives (and never fails) its shards.
func (n Names) ShardTypeSubject(typ, job string) string {
	return n.Prefix + ".shards." + TypeToken(typ) + "." + job
}

// ShardTypeFilter matches every shard of job type typ.
func (n Names) ShardTypeFilter(typ string) string {
	return n.Prefix + ".shards." + TypeToken(typ) + ".>"
}

// WorkersConsumer is the durable consumer every worker that has job type typ pulls from.
func (n Names) WorkersConsumer(typ string) string { return "workers-" + TypeToken(typ) }

// TypeToken encodes a job type (letters, digits, '-', '_', '.') as one subject token and a valid
// consumer name: ASCII letters, digits and '-' stay; every other byte becomes '_' and two hex
// digits. The encoding is injective, so two types never share a subject or a consumer.
func TypeToken(typ string) string {
	plain := true
	for i := 0; i < len(typ); i++ {
		if !tokenByte(typ[i]) {
			plain = false
			break
		}
	}
	if plain {
		return typ
	}
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(typ)+8)
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if tokenByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '_', hex[c>>4], hex[c&15])
	}
	return string(b)
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

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

// BackupShardMsgID is the Nats-Msg-Id of a backup copy of shard index of job (a straggler run
// again near the job's end) sent by the term with id term. It differs from ShardMsgID, so
// JetStream does not drop it as a duplicate of the original, and from a later term's backup.
func BackupShardMsgID(job string, index int, term string) string {
	return ShardMsgID(job, index) + "/backup/" + term
}

// RepairShardMsgID is the Nats-Msg-Id of a shard message re-dispatched by self-repair, which
// found the shard neither merged, queued, in flight nor waiting as a result. first is the
// message's first shard; round identifies the repair round (a clock stamp, unique across terms).
// The id differs from the original dispatch's, from backups' and from every other round's. A
// retried publish of one round gets the same id.
func RepairShardMsgID(job string, first, round int) string {
	return ShardMsgID(job, first) + "/repair/" + strconv.Itoa(round)
}

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
// validate its parameters (one queue group, so one of them answers). The type is one subject
// token (TypeToken), so no two types share a subject.
func (n Names) ValidateSubject(typ string) string {
	return n.Prefix + ".ctl.validate." + TypeToken(typ)
}

// TypesSubject is the core-NATS request subject every worker answers with its id and job types.
func (n Names) TypesSubject() string { return n.Prefix + ".ctl.types" }

// Members is the core-NATS subject on which every worker announces itself (package membership).
func (n Names) Members() string { return n.Prefix + ".ctl.members" }

// Events is the core-NATS subject on which workers publish their election and coordinator events.
func (n Names) Events() string { return n.Prefix + ".ctl.events" }

// ResultBatchMsgID is the Nats-Msg-Id of a message carrying several results of job: a worker
// never re-publishes a batch (a failed publish redelivers its shards), so the id is unique
// (nonce from the worker), and it is distinct from every ResultMsgID.
func ResultBatchMsgID(job, nonce string) string { return job + "/batch/" + nonce }
