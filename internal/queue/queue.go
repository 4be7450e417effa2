// Package queue is the job-intake adapter over an Azure Storage queue (Azurite in tests and local
// runs). The queue carries job ids only, never shards: Azure Storage queues slow down with depth.
//
// Guarantees: a received message stays invisible to other receivers for the visibility timeout and
// comes back if it is not deleted by then, so a leader that dies between receiving a job and
// checkpointing it loses nothing. Delete is idempotent: a message already deleted is not an error.
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/mapagg/mapagg/store"
)

// ErrNotFound: the queue does not exist.
var ErrNotFound = errors.New("queue not found")

// Message is one received queue message.
type Message struct {
	ID           string
	PopReceipt   string
	Text         string
	DequeueCount int64
	// Inserted is when the storage service took the message in (its clock; zero if unknown).
	Inserted time.Time
}

// Queue is one Azure Storage queue.
type Queue struct {
	name      string
	qc        *azqueue.QueueClient
	onRebuilt func(queue, op string)
	log       *slog.Logger // nil: slog.Default()
}

// OnRebuilt sets a function called (after a log line) whenever an operation found the queue
// missing and created it again, with the operation: for events and metrics. It returns q.
func (q *Queue) OnRebuilt(fn func(queue, op string)) *Queue { q.onRebuilt = fn; return q }

// WithLogger sets the logger of q's own log lines (the queue found missing); default
// slog.Default(). It returns q.
func (q *Queue) WithLogger(l *slog.Logger) *Queue { q.log = l; return q }

func (q *Queue) logger() *slog.Logger {
	if q.log != nil {
		return q.log
	}
	return slog.Default()
}

// lost reports whether err says the queue is missing and, if so, creates it again (the storage
// account was wiped or the queue deleted under the cluster). The operation is then tried once
// more. Messages the queue held are gone with it; the jobs they named stay in the jobs container.
func (q *Queue) lost(ctx context.Context, err error, op string) bool {
	if err == nil || !queueerror.HasCode(err, queueerror.QueueNotFound) {
		return false
	}
	if eerr := q.Ensure(ctx); eerr != nil {
		q.logger().Warn("the queue is missing and cannot be created again", "queue", q.name, "found_by", op, "err", eerr)
		return false
	}
	q.logger().Warn("the queue was missing; created it again", "queue", q.name, "found_by", op)
	if q.onRebuilt != nil {
		q.onRebuilt(q.name, op)
	}
	return true
}

// ClientOptions are the SDK options this project uses: a bounded time per try and a few retries.
func ClientOptions() *azqueue.ClientOptions {
	return &azqueue.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{
		MaxRetries: 3, TryTimeout: 15 * time.Second, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 2 * time.Second,
	}, Transport: store.Transport()}}
}

// New returns the queue name of the account in connectionString.
func New(connectionString, name string) (*Queue, error) {
	qc, err := azqueue.NewQueueClientFromConnectionString(connectionString, name, ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("queue client: %w (check the storage connection string)", err)
	}
	return &Queue{name: name, qc: qc}, nil
}

// Open returns queue name of the account of clients (connection string, SAS or Entra ID), built
// with ClientOptions.
func Open(clients *store.Clients, name string) (*Queue, error) {
	qc, err := clients.Queue(name, ClientOptions())
	if err != nil {
		return nil, err
	}
	return &Queue{name: name, qc: qc}, nil
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Ensure creates the queue when it is missing. Concurrent callers all succeed. A caller not
// allowed to create queues succeeds when the queue exists and it can read it.
func (q *Queue) Ensure(ctx context.Context) error {
	_, err := q.qc.Create(ctx, nil)
	if err != nil && queueerror.HasCode(err, queueerror.AuthorizationPermissionMismatch, queueerror.AuthorizationFailure) {
		// Least privilege (Storage Queue Data Message Processor + Sender) may not create queues: an
		// existing queue we can read is enough.
		if _, perr := q.qc.PeekMessages(ctx, nil); perr == nil {
			return nil
		}
		return fmt.Errorf("create queue %s: %w (not allowed to create it and cannot read it: create the queue, or grant Storage Queue Data Message Processor and Sender on it)", q.name, err)
	}
	if err != nil && !queueerror.HasCode(err, queueerror.QueueAlreadyExists) {
		return fmt.Errorf("create queue %s: %w", q.name, err)
	}
	return nil
}

// Enqueue adds a message.
func (q *Queue) Enqueue(ctx context.Context, text string) error {
	_, err := q.qc.EnqueueMessage(ctx, text, nil)
	if q.lost(ctx, err, "enqueue") {
		_, err = q.qc.EnqueueMessage(ctx, text, nil)
	}
	if err != nil {
		return translate("enqueue", err)
	}
	return nil
}

// EnqueueAfter adds a message that stays invisible for delay (whole seconds, up to 7 days).
func (q *Queue) EnqueueAfter(ctx context.Context, text string, delay time.Duration) error {
	secs := int32(min(max(delay/time.Second, 0), 7*24*time.Hour/time.Second))
	opts := &azqueue.EnqueueMessageOptions{VisibilityTimeout: &secs}
	_, err := q.qc.EnqueueMessage(ctx, text, opts)
	if q.lost(ctx, err, "enqueue") {
		_, err = q.qc.EnqueueMessage(ctx, text, opts)
	}
	if err != nil {
		return translate("enqueue", err)
	}
	return nil
}

// Receive takes up to n (1–32) messages, hiding them from other receivers for visibility.
func (q *Queue) Receive(ctx context.Context, n int, visibility time.Duration) ([]Message, error) {
	n = min(max(n, 1), 32)
	vis := int32(max(visibility/time.Second, 1))
	opts := &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(n)), VisibilityTimeout: &vis}
	resp, err := q.qc.DequeueMessages(ctx, opts)
	if q.lost(ctx, err, "receive") {
		resp, err = q.qc.DequeueMessages(ctx, opts)
	}
	if err != nil {
		return nil, translate("receive", err)
	}
	out := make([]Message, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		if m == nil || m.MessageID == nil || m.PopReceipt == nil {
			continue
		}
		msg := Message{ID: *m.MessageID, PopReceipt: *m.PopReceipt}
		if m.MessageText != nil {
			msg.Text = *m.MessageText
		}
		if m.DequeueCount != nil {
			msg.DequeueCount = *m.DequeueCount
		}
		if m.InsertionTime != nil {
			msg.Inserted = *m.InsertionTime
		}
		out = append(out, msg)
	}
	return out, nil
}

// Extend hides a received message for visibility from now on and returns it with its new pop
// receipt (the old one no longer deletes it).
func (q *Queue) Extend(ctx context.Context, m Message, visibility time.Duration) (Message, error) {
	vis := int32(max(visibility/time.Second, 1))
	resp, err := q.qc.UpdateMessage(ctx, m.ID, m.PopReceipt, m.Text, &azqueue.UpdateMessageOptions{VisibilityTimeout: &vis})
	if err != nil {
		return m, translate("extend message", err)
	}
	if resp.PopReceipt != nil {
		m.PopReceipt = *resp.PopReceipt
	}
	return m, nil
}

// Delete removes a received message. A message that is already gone is not an error.
func (q *Queue) Delete(ctx context.Context, m Message) error {
	_, err := q.qc.DeleteMessage(ctx, m.ID, m.PopReceipt, nil)
	if err != nil && !queueerror.HasCode(err, queueerror.MessageNotFound) {
		return translate("delete message", err)
	}
	return nil
}

// Depth returns the approximate number of messages in the queue.
func (q *Queue) Depth(ctx context.Context) (int, error) {
	resp, err := q.qc.GetProperties(ctx, nil)
	if q.lost(ctx, err, "depth") {
		resp, err = q.qc.GetProperties(ctx, nil)
	}
	if err != nil {
		return 0, translate("properties", err)
	}
	if resp.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*resp.ApproximateMessagesCount), nil
}

func translate(op string, err error) error {
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", op, err)
}
