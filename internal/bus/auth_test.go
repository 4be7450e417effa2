package bus_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
	"github.com/mapagg/mapagg/internal/protocol"
)

func newKeyring(t testing.TB, previous ...bus.Key) (*bus.Keyring, bus.Key) {
	t.Helper()
	k, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r, err := bus.NewKeyring(k, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return r, k
}

func TestKeyring_SignVerify(t *testing.T) {
	ring, _ := newKeyring(t)
	other, _ := newKeyring(t)
	const subj, id = "mapagg.results.job1", "job1/3/1"
	body := []byte("result body")
	mac := ring.Sign(subj, id, body)
	if err := ring.Verify(subj, id, body, mac); err != nil {
		t.Fatalf("own MAC refused: %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[0] ^= 1
	forged := "v1:" + ring.Current().ID() + ":" + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		name, subj, id string
		body           []byte
		mac, want      string
	}{
		{"no header", subj, id, body, "", "no Mapagg-Mac header"},
		{"wrong key", subj, id, body, other.Sign(subj, id, body), "signed with key " + other.Current().ID()},
		{"tampered body", subj, id, tampered, mac, "MAC mismatch"},
		{"replayed under another subject", "mapagg.results.job2", id, body, mac, "MAC mismatch"},
		{"another message id", subj, "job1/4/1", body, mac, "MAC mismatch"},
		{"forged MAC", subj, id, body, forged, "MAC mismatch"},
		{"other version", subj, id, body, "v2" + mac[2:], "unknown version"},
		{"truncated", subj, id, body, mac[:len(mac)-1], "MAC of 42 characters"},
	} {
		err := ring.Verify(c.subj, c.id, c.body, c.mac)
		if !errors.Is(err, bus.ErrUnauthenticated) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrUnauthenticated saying %q", c.name, err, c.want)
		}
	}
}

// A key rotates without refusing anything: a ring accepts its previous keys but signs with the
// current one.
func TestKeyring_Rotation(t *testing.T) {
	old, oldKey := newKeyring(t)
	rotated, _ := newKeyring(t, oldKey)
	body := []byte("x")
	if err := rotated.Verify("s", "i", body, old.Sign("s", "i", body)); err != nil {
		t.Fatalf("previous key refused: %v", err)
	}
	if err := old.Verify("s", "i", body, rotated.Sign("s", "i", body)); !errors.Is(err, bus.ErrUnauthenticated) {
		t.Fatalf("a ring without the new key accepted it: %v", err)
	}
	text := rotated.Encode()
	parsed, err := bus.ParseKeys("# comment\n\n" + text)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Current().ID() != rotated.Current().ID() || len(parsed.IDs()) != 2 {
		t.Fatalf("parsed %v, want %v", parsed, rotated)
	}
}

// A key's secret never shows in its text forms, logs or errors.
func TestKey_SecretNeverShown(t *testing.T) {
	ring, k := newKeyring(t)
	secret := k.Encode()
	raw, _ := base64.StdEncoding.DecodeString(secret)
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k), fmt.Sprint(ring), fmt.Sprintf("%+v", ring), fmt.Sprintf("%#v", ring)} {
		if strings.Contains(s, secret) || strings.Contains(s, fmt.Sprint(raw)) || strings.Contains(s, fmt.Sprintf("%x", raw)) {
			t.Fatalf("secret shown in %q", s)
		}
	}
	bad := strings.Repeat("z", 40) + "!"
	for _, text := range []string{bad, secret[:20], ""} {
		_, err := bus.ParseKeys(text)
		if !errors.Is(err, bus.ErrBadKey) || text != "" && strings.Contains(err.Error(), text) {
			t.Fatalf("ParseKeys(%q) = %v: want ErrBadKey without the text", text, err)
		}
	}
	if _, err := bus.ParseKeys(fmt.Sprintf("%x", raw)); err != nil {
		t.Fatalf("hex key refused: %v", err)
	}
}

func FuzzParseMAC(f *testing.F) {
	ring, _ := newKeyring(f)
	valid := ring.Sign("s", "i", []byte("b"))
	for _, s := range []string{valid, "", "v1:", "v1::", "v1:0123abcd:", "v2:0123abcd:" + strings.Repeat("A", 43), valid + "=", "v1:0123ABCD:" + valid[12:]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		id, sum, err := bus.ParseMAC(v)
		if err != nil {
			if id != "" || sum != nil {
				t.Fatalf("error with a result: %q %x", id, sum)
			}
			return
		}
		if len(sum) != 32 || len(id) != 8 {
			t.Fatalf("accepted %q: id %q, %d bytes", v, id, len(sum))
		}
		if again := "v1:" + id + ":" + base64.RawURLEncoding.EncodeToString(sum); again != v {
			t.Fatalf("accepted a non-canonical header %q (canonical %q)", v, again)
		}
		if v != valid && ring.Verify("s", "i", []byte("b"), v) == nil {
			t.Fatalf("a header other than the real one verified: %q", v)
		}
	})
}

func benchSignVerify(b *testing.B, size int) {
	ring, _ := newKeyring(b)
	body := bytes.Repeat([]byte{7}, size)
	const subj, id = "mapagg.results.job-0123456789", "job-0123456789/12345/1"
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(size))
		for b.Loop() { // what a publish adds: the keyed id and the MAC
			_ = ring.Sign(subj, ring.TagMsgID(id), body)
		}
	})
	mac := ring.Sign(subj, id, body)
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(size))
		for b.Loop() {
			if err := ring.Verify(subj, id, body, mac); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The cost per message of authentication. A result message is ~50-200 bytes, a batch of shards
// or results a few KB.
func BenchmarkMAC(b *testing.B) {
	for _, size := range []int{64, 512, 4096} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchSignVerify(b, size) })
	}
}

// deadLetters returns the messages of the dead-letter stream on source.
func deadLetters(t *testing.T, nc *nats.Conn, source string) []jetstream.RawStreamMsg {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := protocol.NewNames("mapagg")
	s, err := js.Stream(ctx, names.DeadStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(names.DeadSubject(source)))
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == names.DeadSubject(source) {
			out = append(out, *m)
		}
	}
	return out
}

// publishRaw publishes a message as a plain NATS client would (no cluster key).
func publishRaw(t *testing.T, nc *nats.Conn, subject, msgID string, data []byte, header nats.Header) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: header}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	if _, err := js.PublishMsg(context.Background(), m, jetstream.WithMsgID(msgID)); err != nil {
		t.Fatal(err)
	}
}

type refusals struct {
	mu   sync.Mutex
	errs []string
}

func (r *refusals) add(source, subject string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, source+" "+subject+": "+err.Error())
}

func (r *refusals) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// Results no member signed (no MAC, another key, a body altered, a MAC moved to another subject)
// never reach the leader: each is dead-lettered with its reason, subject, headers and body, and
// the genuine result is delivered.
func TestResults_UnauthenticatedAreDeadLettered(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	var seen refusals
	b, err := bus.Connect(url, t.Name(), bus.Config{Keys: testkeys.Keys(), OnRefused: seen.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	otherKeys, _ := newKeyring(t)
	intruder, err := bus.Connect(url, "intruder", bus.Config{Keys: otherKeys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(intruder.Close)
	nc := b.Conn()
	subj := b.ResultSubject("job1")
	// 1. no MAC at all: a plain NATS client.
	publishRaw(t, nc, subj, "job1/0/1", []byte("forged"), nil)
	// 2. a member of another cluster (another key).
	if err := intruder.PublishAll(ctx, []bus.Outgoing{{Subject: subj, MsgID: "job1/1/1", Data: []byte("other key")}}); err != nil {
		t.Fatal(err)
	}
	// 3. a genuine MAC on an altered body, 4. a genuine MAC of job2's result replayed on job1.
	mac := testkeys.Keys().Sign(subj, "job1/2/1", []byte("real"))
	publishRaw(t, nc, subj, "job1/2/1", []byte("altered"), nats.Header{bus.MACHeader: {mac}})
	mac2 := testkeys.Keys().Sign(b.ResultSubject("job2"), "job1/3/1", []byte("job2's")) // same id, other subject
	publishRaw(t, nc, subj, "job1/3/1", []byte("job2's"), nats.Header{bus.MACHeader: {mac2}})
	// 5. a forgery under the genuine result's message id, published first: JetStream must not
	// drop the genuine one as its duplicate.
	publishRaw(t, nc, subj, "job1/4/1", []byte("pre-empted"), nil)
	// 6. the genuine one.
	if err := b.PublishAll(ctx, []bus.Outgoing{{Subject: subj, MsgID: "job1/4/1", Data: []byte("genuine")}}); err != nil {
		t.Fatal(err)
	}
	feed, err := b.OpenResults(ctx, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Stop()
	d := recv(t, feed.C, 1)[0]
	if string(d.Data()) != "genuine" {
		t.Fatalf("the leader got %q", d.Data())
	}
	_ = d.Ack()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return seen.n() == 5 }, "refusals: %v", seen.errs)
	dead := deadLetters(t, nc, bus.SourceResults)
	if len(dead) != 5 {
		t.Fatalf("%d dead letters, want 5", len(dead))
	}
	wantReason := map[string]string{"forged": "no Mapagg-Mac header", "other key": "signed with key " + otherKeys.Current().ID(),
		"altered": "MAC mismatch", "job2's": "MAC mismatch", "pre-empted": "no Mapagg-Mac header"}
	for _, m := range dead {
		reason := m.Header.Get("Reason")
		if want := wantReason[string(m.Data)]; !strings.HasPrefix(reason, "unauthenticated: ") || !strings.Contains(reason, want) {
			t.Errorf("dead letter %q: reason %q, want unauthenticated… %q", m.Data, reason, want)
		}
		if m.Header.Get("Original-Subject") != subj || m.Header.Get("Original-Nats-Msg-Id") == "" {
			t.Errorf("dead letter %q lost its subject or id: %v", m.Data, m.Header)
		}
	}
	if b.Refused() != 5 {
		t.Fatalf("Refused() = %d, want 5", b.Refused())
	}
	// Nothing is left to redeliver: refused results were terminated.
	select {
	case d := <-feed.C:
		t.Fatalf("refused result redelivered: %q", d.Data())
	case <-time.After(300 * time.Millisecond):
	}
}

// A forged shard is never handed to a worker: it is dead-lettered (the cluster's key is one this
// member holds, so a MAC of another key is forged), and the genuine shards behind it are
// delivered with the feed's credit intact.
func TestShards_UnauthenticatedAreDeadLettered(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Connect(testenv.NATS(t), t.Name(), bus.Config{Keys: testkeys.Keys(), ClusterKeyID: testkeys.Keys().Current().ID})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	subj := b.ShardTypeSubject("t", "job1")
	for i := range 3 {
		publishRaw(t, b.Conn(), subj, fmt.Sprintf("job1/%d", i), []byte("forged"), nats.Header{bus.MACHeader: {"v1:00000000:" + strings.Repeat("A", 43)}})
	}
	if err := b.PublishAll(ctx, []bus.Outgoing{{Subject: subj, MsgID: "job1/9", Data: []byte("genuine")}}); err != nil {
		t.Fatal(err)
	}
	f, err := b.Shards(ctx, shardOpts(1, "t")) // one credit: each refusal must give it back
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	d := recv(t, f.C, 1)[0]
	if string(d.Data()) != "genuine" {
		t.Fatalf("worker got %q", d.Data())
	}
	_ = d.Ack()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return len(deadLetters(t, b.Conn(), bus.SourceShards)) == 3 }, "forged shards not dead-lettered")
	for _, m := range deadLetters(t, b.Conn(), bus.SourceShards) {
		if r := m.Header.Get("Reason"); !strings.HasPrefix(r, "unauthenticated: signed with key 00000000") {
			t.Fatalf("reason %q", r)
		}
	}
	if f.Held() != 0 {
		t.Fatalf("feed holds %d refused shards", f.Held())
	}
}

// A bus without a cluster key cannot publish shards or results (it would be refused by every
// member), and says why.
func TestPublish_WithoutKeyFails(t *testing.T) {
	b, err := bus.Connect(testenv.NATS(t), t.Name(), bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.PublishAll(context.Background(), []bus.Outgoing{{Subject: b.ResultSubject("j"), MsgID: "j/0/1"}})
	if !errors.Is(err, bus.ErrNoClusterKey) || !errors.Is(err, bus.ErrPublish) {
		t.Fatalf("got %v, want ErrNoClusterKey", err)
	}
	if _, err := b.Publish(bus.Outgoing{Subject: b.ResultSubject("j"), MsgID: "j/0/1"}); !errors.Is(err, bus.ErrNoClusterKey) {
		t.Fatalf("got %v, want ErrNoClusterKey", err)
	}
}
