package protocol

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A job's queue message is its id, or its id, a newline and its spec's JSON (an inline spec,
// written when the spec is at most InlineSpecMax bytes). The spec blob stays the job's record;
// the inline copy spares the leader reading it back. Earlier releases wrote the id alone, and a
// leader reads both forms.

// InlineSpecMax is the largest spec that travels in its queue message (Azure allows 64 KiB a
// message; the rest is the id and room for the SDK's XML escaping).
const InlineSpecMax = 32 << 10

// QueueText is the text of job id's queue message; spec, when not nil, travels inline.
func QueueText(id string, spec []byte) string {
	if len(spec) == 0 || len(spec) > InlineSpecMax {
		return id
	}
	return id + "\n" + string(spec)
}

// ParseQueueText splits a queue message's text into its job id and inline spec (nil when it
// has none). It checks the id; the spec is checked by ParseSpec, which must also find the id.
func ParseQueueText(text string) (id string, spec *Spec, err error) {
	id, rest, inline := strings.Cut(strings.TrimSpace(text), "\n")
	id = strings.TrimSpace(id)
	if err := CheckID(id); err != nil {
		return id, nil, err
	}
	if !inline {
		return id, nil, nil
	}
	if spec, err = ParseSpec([]byte(rest)); err != nil {
		return id, nil, fmt.Errorf("inline spec of job %s: %w", id, err)
	}
	if spec.ID != id {
		return id, nil, fmt.Errorf("inline spec of job %s names job %q", id, Clip(spec.ID, ClipLen))
	}
	return id, spec, nil
}

// SubmittedInline is the payload of a CtlSubmitted hint for a job whose queue message carries
// its spec: the leader then reads nothing ahead. An earlier release takes it for a malformed id
// and only polls the queue.
func SubmittedInline(id string) []byte { return []byte(id + " inline") }

// ParseSubmitted reads a CtlSubmitted payload: the job id, and whether its spec is inline.
func ParseSubmitted(data []byte) (id string, inline bool) {
	raw, tag, _ := bytes.Cut(data, []byte(" "))
	return string(raw), bytes.Equal(tag, []byte("inline"))
}

// FreshShardMsgID is the Nats-Msg-Id of shard message index of job sent by term at the moment
// at, for a job with no stored state yet (a small job taken in on its first delivery). It
// differs from ShardMsgID, so a later leader's plan of the same job is not dropped as its
// duplicate, and it says when it was sent: a worker skips the check of the job's end for a
// shard sent a moment ago (ShardSentAt). The id is covered by the message's MAC.
func FreshShardMsgID(job string, index int, term string, at time.Time) string {
	return ShardMsgID(job, index) + freshTag + strconv.FormatInt(at.UnixMilli(), 10) + "/" + term
}

const freshTag = "/fresh/"

// ShardSentAt reads the time a FreshShardMsgID names; false for any other id. A key tag after
// '~' (bus.Keyring.TagMsgID) is ignored.
func ShardSentAt(msgID string) (time.Time, bool) {
	if i := strings.LastIndexByte(msgID, '~'); i >= 0 {
		msgID = msgID[:i]
	}
	_, rest, ok := strings.Cut(msgID, freshTag)
	if !ok {
		return time.Time{}, false
	}
	ms, _, ok := strings.Cut(rest, "/")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}
