package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// NATSAuth is how a client authenticates to NATS and verifies the server. At most one of CredsFile,
// NKeySeedFile and User is set. Secrets come from files (or, for Password, from the environment
// through the caller); none of them is ever logged or put in an error.
type NATSAuth struct {
	// CredsFile is a decentralized-auth credentials file (user JWT + nkey seed, `nsc` output).
	CredsFile string
	// NKeySeedFile holds an nkey user seed (SU...); the public key is derived from it.
	NKeySeedFile string
	// User and Password authenticate with a user/password pair. Password is a secret.
	User, Password string
	// TLSCAFile verifies the server's certificate (PEM). Empty uses the system roots when the URL
	// is tls:// or the server requires TLS.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client certificate (mutual TLS), both or neither.
	TLSCertFile, TLSKeyFile string
}

// Validate reports every problem with the settings and what to change. It reads the files it
// names, so a missing or unreadable file is found at start, not at the first reconnect.
func (a NATSAuth) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("nats: "+format, args...)) }
	n := 0
	for _, s := range []string{a.CredsFile, a.NKeySeedFile, a.User} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		add("more than one of --nats-creds, --nats-nkey-file and --nats-user is set: keep the one your server's accounts use")
	}
	if a.User != "" && a.Password == "" {
		add("--nats-user %q has no password: set NATS_PASSWORD or --nats-password-file", a.User)
	}
	if a.User == "" && a.Password != "" {
		add("a NATS password is set without --nats-user (env NATS_USER): set the user too")
	}
	if (a.TLSCertFile == "") != (a.TLSKeyFile == "") {
		add("--nats-tls-cert and --nats-tls-key go together: set both for mutual TLS, or neither")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", a.CredsFile}, {"--nats-nkey-file", a.NKeySeedFile}, {"--nats-tls-ca", a.TLSCAFile},
		{"--nats-tls-cert", a.TLSCertFile}, {"--nats-tls-key", a.TLSKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if fh, err := os.Open(f.path); err != nil {
			add("%s %s: cannot read it (%v)", f.flag, f.path, errors.Unwrap(err))
		} else {
			fh.Close()
		}
	}
	if len(errs) == 0 && a.TLSCAFile != "" {
		pem, _ := os.ReadFile(a.TLSCAFile)
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			add("--nats-tls-ca %s holds no PEM certificate", a.TLSCAFile)
		}
	}
	if len(errs) == 0 && a.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(a.TLSCertFile, a.TLSKeyFile); err != nil {
			add("--nats-tls-cert %s / --nats-tls-key %s: not a matching PEM certificate and key", a.TLSCertFile, a.TLSKeyFile)
		}
	}
	return errors.Join(errs...)
}

// Options turns the settings into nats.Options for Connect.
func (a NATSAuth) Options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.CredsFile != "":
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeySeedFile)
		if err != nil {
			// The nkeys errors name the problem ("invalid seed"), never the seed.
			return nil, fmt.Errorf("nats: --nats-nkey-file %s: %w", a.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(a.TLSCAFile))
	}
	if a.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(a.TLSCertFile, a.TLSKeyFile))
	}
	return opts, nil
}

// Describe names the auth mode for logs, without secrets.
func (a NATSAuth) Describe() string {
	var parts []string
	switch {
	case a.CredsFile != "":
		parts = append(parts, "creds "+a.CredsFile)
	case a.NKeySeedFile != "":
		parts = append(parts, "nkey "+a.NKeySeedFile)
	case a.User != "":
		parts = append(parts, "user "+a.User)
	default:
		parts = append(parts, "no auth")
	}
	if a.TLSCAFile != "" {
		parts = append(parts, "tls ca "+a.TLSCAFile)
	}
	if a.TLSCertFile != "" {
		parts = append(parts, "client cert "+a.TLSCertFile)
	}
	return strings.Join(parts, ", ")
}
