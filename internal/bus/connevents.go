package bus

import (
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"
)

// ConnEvents returns options that log the NATS connection's events through log. They are a
// disconnect (with its reason), a reconnect (with the server's URL, credentials redacted), the
// connection closing for good, and asynchronous errors. A slow consumer is the main one: a
// subscription that fell behind and lost messages (nats.go would otherwise print it to stderr). Connect installs
// them with slog.Default(); pass ConnEvents(yourLogger) among its options to use another logger.
func ConnEvents(log *slog.Logger) []nats.Option {
	log = log.With("component", "nats")
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // Close: the closed handler speaks
			}
			if err == nil {
				err = errors.New("connection lost")
			}
			log.Warn("nats disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted(), "reconnects", nc.Stats().Reconnects)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Warn("nats connection closed", "err", err)
				return
			}
			log.Debug("nats connection closed")
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			args := []any{"err", err}
			if sub != nil {
				args = append(args, "subject", sub.Subject)
				if msgs, bytes, perr := sub.Pending(); perr == nil {
					args = append(args, "pending_msgs", msgs, "pending_bytes", bytes)
				}
				if dropped, derr := sub.Dropped(); derr == nil {
					args = append(args, "dropped", dropped)
				}
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				log.Error("nats slow consumer: a subscription fell behind and messages were dropped", args...)
				return
			}
			log.Error("nats asynchronous error", args...)
		}),
	}
}
