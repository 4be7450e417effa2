package rig

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/faultproxy"
)

// Links are one worker's links to NATS and to storage, each through a fault proxy of its own.
type Links struct {
	Worker            string
	NATS, Blob, Queue *faultproxy.Proxy
}

// CutNATS blackholes the worker's NATS link: a silent partition, no FIN.
func (l *Links) CutNATS() { l.NATS.Blackhole() }

// CutStorage blackholes the worker's blob and queue links.
func (l *Links) CutStorage() { l.Blob.Blackhole(); l.Queue.Blackhole() }

// Heal ends every cut; held bytes are delivered.
func (l *Links) Heal() {
	for _, p := range l.proxies() {
		p.Heal()
	}
}

// Close closes the proxies (with a FIN).
func (l *Links) Close() {
	for _, p := range l.proxies() {
		_ = p.Close()
	}
}

func (l *Links) proxies() []*faultproxy.Proxy {
	var ps []*faultproxy.Proxy
	for _, p := range []*faultproxy.Proxy{l.NATS, l.Blob, l.Queue} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// ProxyLinks starts, for each worker id, proxies in front of the NATS server at natsURL (one
// server) and the blob and queue endpoints of the connection string connStr. It returns them
// with the environment that points each worker at its own (Spec.WorkerEnv).
func ProxyLinks(ids []string, natsURL, connStr string) (map[string]*Links, map[string][]string, error) {
	nu, err := url.Parse(natsURL)
	if err != nil || nu.Host == "" || strings.Contains(natsURL, ",") {
		return nil, nil, fmt.Errorf("proxy links: NATS URL %q: want one nats://host:port", natsURL)
	}
	blob, err := endpointHost(connStr, "BlobEndpoint")
	if err != nil {
		return nil, nil, err
	}
	queue, err := endpointHost(connStr, "QueueEndpoint")
	if err != nil {
		return nil, nil, err
	}
	links, env := map[string]*Links{}, map[string][]string{}
	closeAll := func() {
		for _, l := range links {
			l.Close()
		}
	}
	for _, id := range ids {
		l := &Links{Worker: id}
		links[id] = l
		var errs []error
		for _, x := range []struct {
			p      **faultproxy.Proxy
			target string
		}{{&l.NATS, nu.Host}, {&l.Blob, blob}, {&l.Queue, queue}} {
			p, err := faultproxy.New(x.target)
			errs = append(errs, err)
			*x.p = p
		}
		if err := errors.Join(errs...); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("proxy links of %s: %w", id, err)
		}
		cs := strings.Replace(connStr, "//"+blob+"/", "//"+l.Blob.Addr()+"/", 1)
		cs = strings.Replace(cs, "//"+queue+"/", "//"+l.Queue.Addr()+"/", 1)
		env[id] = []string{"NATS_URL=nats://" + l.NATS.Addr(), "AZURE_STORAGE_CONNECTION_STRING=" + cs}
	}
	return links, env, nil
}

// endpointHost is the host:port of the endpoint key (BlobEndpoint, QueueEndpoint) of a
// connection string.
func endpointHost(connStr, key string) (string, error) {
	for _, f := range strings.Split(connStr, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(f), key+"="); ok {
			u, err := url.Parse(v)
			if err != nil || u.Host == "" {
				return "", fmt.Errorf("proxy links: %s %q is not a URL", key, v)
			}
			return u.Host, nil
		}
	}
	return "", fmt.Errorf("proxy links: the connection string has no %s (an Azurite one has)", key)
}

// ConnStr is the shared storage's connection string ("" unless Shared).
func (r *Rig) ConnStr() string { return r.connStr }
