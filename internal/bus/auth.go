package bus

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/protocol"
)

// MACHeader is the header that authenticates a shard or result message:
// "v1:<key id>:<base64url HMAC-SHA256>" over the subject, the Nats-Msg-Id and the body.
const MACHeader = "Mapagg-Mac"

// KeySize is the size of a cluster key's secret in bytes (256 bits).
const KeySize = 32

const (
	macVersion = "v1"
	macDomain  = "mapagg-msg-v1\x00" // separates these MACs from any other use of the key
	idDomain   = "mapagg-key-id-v1\x00"
	idLen      = 8 // hex characters of a key id: 32 bits, enough to tell a few keys apart
	macB64Len  = 43
)

// Errors of message authentication. ErrUnauthenticated is matched by every refusal.
var (
	// ErrNoClusterKey: this bus has no cluster key (Config.Keys), so it can neither publish nor
	// accept shards and results.
	ErrNoClusterKey = errors.New("no cluster key: set bus.Config.Keys (a member reads or creates it, see node)")
	// ErrUnauthenticated: a delivery has no valid MAC from a key this member holds.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrBadKey: a cluster key could not be parsed.
	ErrBadKey = errors.New("bad cluster key")
)

// Key is a cluster key: KeySize secret bytes and a public id derived from them. Its String,
// GoString and LogValue show the id only, never the secret.
type Key struct {
	id     string
	secret []byte
}

// NewKey makes a key of secret, which must be exactly KeySize bytes (copied).
func NewKey(secret []byte) (Key, error) {
	if len(secret) != KeySize {
		return Key{}, fmt.Errorf("%w: %d bytes, want %d (generate one with: head -c 32 /dev/urandom | base64)", ErrBadKey, len(secret), KeySize)
	}
	s := append([]byte(nil), secret...)
	h := sha256.Sum256(append([]byte(idDomain), s...))
	return Key{id: hex.EncodeToString(h[:])[:idLen], secret: s}, nil
}

// GenerateKey returns a new random key.
func GenerateKey() (Key, error) {
	s := make([]byte, KeySize)
	if _, err := rand.Read(s); err != nil {
		return Key{}, fmt.Errorf("generate cluster key: %w", err)
	}
	return NewKey(s)
}

// ID is the key's public id (8 hex digits of a hash of the secret).
func (k Key) ID() string { return k.id }

// String shows the id only.
func (k Key) String() string { return "cluster-key:" + k.id }

// GoString shows the id only (%#v).
func (k Key) GoString() string { return k.String() }

// LogValue shows the id only.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Encode returns the key in its text form (base64 of the secret): what ParseKeys reads. It is the
// secret: store it, never log it.
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.secret) }

// Keyring holds the key a member publishes with (the current one) and the keys it accepts (the
// current one and any previous ones, so a key can rotate without refusing anything). It is safe
// for concurrent use.
type Keyring struct {
	current Key
	byID    map[string]Key
	pool    sync.Pool // *macState of the current key
}

type macState struct {
	h   hash.Hash
	buf []byte
	out []byte
}

// NewKeyring returns a keyring that publishes with current and accepts current and previous.
func NewKeyring(current Key, previous ...Key) (*Keyring, error) {
	if current.secret == nil {
		return nil, fmt.Errorf("%w: no current key", ErrBadKey)
	}
	r := &Keyring{current: current, byID: map[string]Key{current.id: current}}
	for _, k := range previous {
		if k.secret == nil {
			return nil, fmt.Errorf("%w: an empty previous key", ErrBadKey)
		}
		if o, ok := r.byID[k.id]; ok && !hmac.Equal(o.secret, k.secret) {
			return nil, fmt.Errorf("%w: two different keys share the id %s: replace one", ErrBadKey, k.id)
		}
		r.byID[k.id] = k
	}
	return r, nil
}

// ParseKeys reads a keyring from text: one base64 (standard or URL alphabet, padded or not) or
// hex key of KeySize bytes per line; the first line is the current key, the others are accepted
// too. Blank lines and lines starting with '#' are ignored. Errors never quote the text.
func ParseKeys(text string) (*Keyring, error) {
	var keys []Key
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		secret, err := decodeSecret(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadKey, i+1, err)
		}
		k, err := NewKey(secret)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key in the text (one base64 key of %d bytes per line; generate one with: head -c 32 /dev/urandom | base64)", ErrBadKey, KeySize)
	}
	return NewKeyring(keys[0], keys[1:]...)
}

func decodeSecret(s string) ([]byte, error) {
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("not base64 or hex (%d characters)", len(s))
}

// Encode returns the keyring's text form (current key first): the secret, never log it.
func (r *Keyring) Encode() string {
	var sb strings.Builder
	sb.WriteString(r.current.Encode() + "\n")
	for id, k := range r.byID {
		if id != r.current.id {
			sb.WriteString(k.Encode() + "\n")
		}
	}
	return sb.String()
}

// Current is the key messages are published with.
func (r *Keyring) Current() Key { return r.current }

// IDs are the ids of the accepted keys, current first.
func (r *Keyring) IDs() []string {
	ids := []string{r.current.id}
	for id := range r.byID {
		if id != r.current.id {
			ids = append(ids, id)
		}
	}
	return ids
}

// String shows the key ids only.
func (r *Keyring) String() string { return "keyring[" + strings.Join(r.IDs(), ",") + "]" }

// GoString shows the key ids only (%#v).
func (r *Keyring) GoString() string { return r.String() }

// LogValue shows the key ids only.
func (r *Keyring) LogValue() slog.Value { return slog.StringValue(r.String()) }

// Sign returns the MACHeader value of a message.
func (r *Keyring) Sign(subject, msgID string, body []byte) string {
	st, _ := r.pool.Get().(*macState)
	if st == nil {
		st = &macState{h: hmac.New(sha256.New, r.current.secret)}
	}
	st.buf, st.out = mac(st.h, st.buf[:0], st.out[:0], subject, msgID, body)
	v := make([]byte, 0, len(macVersion)+1+idLen+1+macB64Len)
	v = append(v, macVersion...)
	v = append(v, ':')
	v = append(v, r.current.id...)
	v = append(v, ':')
	v = base64.RawURLEncoding.AppendEncode(v, st.out)
	r.pool.Put(st)
	return string(v)
}

// mac computes HMAC(key, domain | len subject | subject | len msgID | msgID | body) into out.
func mac(h hash.Hash, buf, out []byte, subject, msgID string, body []byte) (bufUsed, sum []byte) {
	h.Reset()
	buf = append(buf, macDomain...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(subject)))
	buf = append(buf, subject...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(msgID)))
	buf = append(buf, msgID...)
	h.Write(buf)
	h.Write(body)
	return buf, h.Sum(out)
}

// ParseMAC splits a MACHeader value into its key id and MAC, or says what is wrong with it.
func ParseMAC(v string) (keyID string, sum []byte, err error) {
	if v == "" {
		return "", nil, errors.New("no " + MACHeader + " header")
	}
	ver, rest, ok := strings.Cut(v, ":")
	if !ok || ver != macVersion {
		return "", nil, fmt.Errorf("%s header: unknown version (want %s)", MACHeader, macVersion)
	}
	keyID, b64, ok := strings.Cut(rest, ":")
	if !ok || len(keyID) != idLen || !isHex(keyID) {
		return "", nil, fmt.Errorf("%s header: malformed key id", MACHeader)
	}
	if len(b64) != macB64Len {
		return "", nil, fmt.Errorf("%s header: MAC of %d characters, want %d", MACHeader, len(b64), macB64Len)
	}
	sum, err = base64.RawURLEncoding.Strict().DecodeString(b64)
	if err != nil || len(sum) != sha256.Size {
		return "", nil, fmt.Errorf("%s header: MAC is not base64url", MACHeader)
	}
	return keyID, sum, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// UnknownKeyError: a message carries a well-formed MAC of a key this member does not hold. It
// may be genuine (this member has the wrong key) or forged; it matches ErrUnauthenticated.
type UnknownKeyError struct {
	KeyID    string   // the key id in the message
	Accepted []string // the ids this member accepts
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("%v: signed with key %s, this member accepts keys %s: the members do not share the cluster key (see docs/deploy.md, cluster key)",
		ErrUnauthenticated, e.KeyID, strings.Join(e.Accepted, ","))
}

func (e *UnknownKeyError) Unwrap() error { return ErrUnauthenticated }

// Verify checks a message's MACHeader value against the keys of the ring. The error (matching
// ErrUnauthenticated) says why, naming key ids but never a secret.
func (r *Keyring) Verify(subject, msgID string, body []byte, header string) error {
	keyID, sum, err := ParseMAC(header)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	k, known := r.byID[keyID]
	if !known {
		return &UnknownKeyError{KeyID: keyID, Accepted: r.IDs()}
	}
	var ok bool
	if k.id == r.current.id {
		st, _ := r.pool.Get().(*macState)
		if st == nil {
			st = &macState{h: hmac.New(sha256.New, r.current.secret)}
		}
		st.buf, st.out = mac(st.h, st.buf[:0], st.out[:0], subject, msgID, body)
		ok = hmac.Equal(st.out, sum)
		r.pool.Put(st)
	} else {
		_, want := mac(hmac.New(sha256.New, k.secret), nil, nil, subject, msgID, body)
		ok = hmac.Equal(want, sum)
	}
	if !ok {
		return fmt.Errorf("%w: MAC mismatch with key %s (forged, altered, or moved to another subject)", ErrUnauthenticated, keyID)
	}
	return nil
}

// TagMsgID returns msgID with a keyed tag appended ("<msgID>~<16 hex>"). The tag is the same for
// every member that holds the current key, so JetStream still deduplicates a re-publish by this
// member or by a new leader. It is unguessable without the key: a client without it cannot
// publish first under a genuine message's id and have JetStream drop the genuine one.
func (r *Keyring) TagMsgID(msgID string) string {
	st, _ := r.pool.Get().(*macState)
	if st == nil {
		st = &macState{h: hmac.New(sha256.New, r.current.secret)}
	}
	st.h.Reset()
	st.buf = append(append(st.buf[:0], idTagDomain...), msgID...)
	st.h.Write(st.buf)
	st.out = st.h.Sum(st.out[:0])
	v := make([]byte, 0, len(msgID)+1+2*idTagBytes)
	v = append(append(v, msgID...), '~')
	v = hex.AppendEncode(v, st.out[:idTagBytes])
	r.pool.Put(st)
	return string(v)
}

const (
	idTagDomain = "mapagg-msgid-v1\x00"
	idTagBytes  = 8
)

// sign builds the NATS message of m, with its keyed message id (TagMsgID) and MAC header.
func (b *Bus) sign(m Outgoing) (*nats.Msg, string, error) {
	if b.cfg.Keys == nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, ErrNoClusterKey)
	}
	id := b.cfg.Keys.TagMsgID(m.MsgID)
	msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
	msg.Header.Set(MACHeader, b.cfg.Keys.Sign(m.Subject, id, m.Data))
	return msg, id, nil
}

// verify checks a delivered shard or result.
func (b *Bus) verify(m jetstream.Msg) error {
	if b.cfg.Keys == nil {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, ErrNoClusterKey)
	}
	h := m.Headers()
	return b.cfg.Keys.Verify(m.Subject(), h.Get(jetstream.MsgIDHeader), m.Data(), h.Get(MACHeader))
}

// refuse naks a shard signed with a key this member lacks. It dead-letters any other delivery
// that failed verification (subject, headers and body kept) and terminates it. If the dead
// letter cannot be stored, the delivery is handed back for a later retry. It never reaches the
// feed's owner. refused counts it.
func (b *Bus) refuse(ctx context.Context, m jetstream.Msg, source string, why error) {
	var unknown *UnknownKeyError
	if source == SourceShards && errors.As(why, &unknown) && b.mayBeGenuine(unknown.KeyID) {
		// Signed with a key this member lacks, which may be the cluster's: this member's key
		// is likely wrong. The shard goes back at once for a member that can verify it.
		b.unknownKey.Add(1)
		_ = m.Nak()
		if b.cfg.OnRefused != nil {
			b.cfg.OnRefused(source, m.Subject(), why)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reason := protocol.Clip(why.Error(), maxReason)
	if err := b.deadLetterMsg(ctx, source, m, reason); err != nil {
		_ = m.NakWithDelay(retryRefused)
		return
	}
	b.refused.Add(1)
	_ = m.TermWithReason("unauthenticated")
	if b.cfg.OnRefused != nil {
		b.cfg.OnRefused(source, m.Subject(), why)
	}
}

// Refused is how many deliveries this bus refused as unauthenticated and dead-lettered.
func (b *Bus) Refused() uint64 { return b.refused.Load() }

// mayBeGenuine reports whether a MAC of keyID could be the cluster's: the cluster's key id is
// not known (Config.ClusterKeyID), or is keyID. When the cluster signs with a key this member
// holds, a MAC of another key is a forgery.
func (b *Bus) mayBeGenuine(keyID string) bool {
	if b.cfg.ClusterKeyID == nil {
		return true
	}
	id := b.cfg.ClusterKeyID()
	if id == "" || id == keyID {
		return true
	}
	_, held := b.cfg.Keys.byID[id]
	return !held
}

// UnknownKey is how many shards this bus handed back (nak) because they were signed with a key
// it does not hold.
func (b *Bus) UnknownKey() uint64 { return b.unknownKey.Load() }

// retryRefused is how long a refused delivery waits when its dead letter could not be stored.
const retryRefused = time.Second

// deadLetterMsg stores a delivered message in the dead-letter stream with its subject, headers
// (NATS's own, such as Nats-Msg-Id, renamed Original-<name> so JetStream does not act on them)
// and body, and the reason.
func (b *Bus) deadLetterMsg(ctx context.Context, source string, m jetstream.Msg, reason string) error {
	if _, err := b.js.PublishMsg(ctx, b.deadLetter(source, m.Subject(), m.Headers(), m.Data(), reason)); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// deadLetterAsync dead-letters a core-NATS message without waiting for the stream's answer.
func (b *Bus) deadLetterAsync(source string, m *nats.Msg, reason string) error {
	_, err := b.js.PublishMsgAsync(b.deadLetter(source, m.Subject, m.Header, m.Data, protocol.Clip(reason, maxReason)))
	return err
}

func (b *Bus) deadLetter(source, subject string, h nats.Header, data []byte, reason string) *nats.Msg {
	d := nats.NewMsg(b.names.DeadSubject(source))
	d.Data = data
	for k, vs := range h {
		name := k
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			name = "Original-" + k
		}
		for _, v := range vs {
			d.Header.Add(name, v)
		}
	}
	d.Header.Set("Original-Subject", subject)
	d.Header.Set("Reason", reason)
	return d
}

// rateLimit allows up to n events a second.
type rateLimit struct {
	mu     sync.Mutex
	second int64
	n      int
}

func (r *rateLimit) allow(now time.Time, perSec int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := now.Unix(); s != r.second {
		r.second, r.n = s, 0
	}
	r.n++
	return r.n <= perSec
}
