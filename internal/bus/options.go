package bus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrMisconfigured: the settings cannot work with the server reached (for example stream replicas
// 3 on a server that is not part of a cluster). Retrying does not help; change the settings.
var ErrMisconfigured = errors.New("bus settings do not fit the NATS server")

// checkServer refuses settings the connected server cannot honour: stream replicas above 1 on a
// server that is not in a cluster, or above the number of servers the client knows of.
func checkServer(nc *nats.Conn, cfg Config) error {
	if cfg.Replicas <= 1 {
		return nil
	}
	url := nc.ConnectedUrlRedacted()
	if nc.ConnectedClusterName() == "" {
		return fmt.Errorf("%w: stream replicas %d need a NATS cluster of at least %d JetStream servers, but %s is not clustered: "+
			"pass --stream-replicas 1 (env STREAM_REPLICAS) or connect to a cluster", ErrMisconfigured, cfg.Replicas, cfg.Replicas, url)
	}
	if known := len(nc.Servers()); known < cfg.Replicas {
		return fmt.Errorf("%w: stream replicas %d, but cluster %s lists only %d servers: lower --stream-replicas (env STREAM_REPLICAS) or add servers",
			ErrMisconfigured, cfg.Replicas, nc.ConnectedClusterName(), known)
	}
	return nil
}

// Permanent reports whether a Connect error cannot go away by retrying: settings that do not fit
// the server, refused credentials, or a certificate that does not verify.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		opErr    *net.OpError
	)
	switch {
	case errors.Is(err, ErrMisconfigured), errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired),
		errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname), errors.As(err, &verify):
		return true
	case errors.As(err, &opErr) && strings.Contains(opErr.Error(), "tls: "):
		return true // a TLS alert from the server: it refused our certificate
	}
	return errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		strings.Contains(err.Error(), "Authorization Violation")
}
