package devserver

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartNATS starts an in-process NATS server with JetStream on a free 127.0.0.1 port, storing
// in storeDir. The caller owns it and must Shutdown it.
func StartNATS(storeDir string) (*server.Server, error) {
	opts := &server.Options{
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           storeDir,
		NoLog:              true,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("nats server not ready within 10s")
	}
	return s, nil
}
