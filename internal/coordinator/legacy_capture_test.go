package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/store"
)

// legacyState is a half-done cluster's storage and streams, as the previous release left them.
type legacyState struct {
	Corpus    string            `json:"corpus"`
	Keyed     string            `json:"keyed"`
	Aggregate string            `json:"aggregate"`
	Blobs     map[string][]byte `json:"blobs"`
	Corpora   map[string][]byte `json:"corpora"`
	// Meta is the metadata of the blobs that have some (a checkpoint's status record).
	Meta    map[string]map[string]string `json:"meta"`
	Shards  []legacyMsg                  `json:"shards"`
	Results []legacyMsg                  `json:"results"`
}

type legacyMsg struct {
	Subject string `json:"subject"`
	MsgID   string `json:"msg_id"`
	Data    []byte `json:"data"`
}

// TestCaptureLegacy wrote testdata/legacy-v1.json: a keyed job in its map phase and an aggregate
// job, half done by the release before job kinds (commit 0755973), with their messages in flight.
// Run on that release only: MAPAGG_CAPTURE_LEGACY=FILE go test -run TestCaptureLegacy.
func TestCaptureLegacy(t *testing.T) {
	out := os.Getenv("MAPAGG_CAPTURE_LEGACY")
	if out == "" {
		t.Skip("captures the previous release's state: set MAPAGG_CAPTURE_LEGACY=FILE on that release")
	}
	r := newRig(t)
	ctx := context.Background()
	corpus := store.New(r.blob, "legacy-corpus")
	if err := corpus.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for b := range 3 {
		var text []byte
		for l := range 1500 {
			text = fmt.Appendf(text, "w%d ünï%d common  x%d\tw%d\n", (b*1500+l)%997, l%13, b*1500+l, l%5)
		}
		if _, err := corpus.Put(ctx, fmt.Sprintf("in/%02d.txt", b), text, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	l := r.lead(1)
	wctx, stopWorkers := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for i := range 2 {
		cfg := worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 1, MapDelay: time.Second, TempDir: t.TempDir(), Logger: quietLog()}
		cfg.Registry = builtin.Registry()
		w, err := worker.New(cfg, connect(t, r.url), r.st, store.NewEnv(r.blob))
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = w.Run(wctx); done <- struct{}{} }()
	}
	keyed := r.submit("wordcount", `{"container":"legacy-corpus","prefix":"in/","output":"blob","partitions":3,"shard_bytes":4000}`)
	agg := r.submit("primes", `{"from":1,"to":2000000,"shards":80}`)
	eventually(t, 60*time.Second, "both jobs half done", func() bool {
		k, err1 := readRecord(r, keyed)
		a, err2 := readRecord(r, agg)
		return err1 == nil && err2 == nil && k.Phase == protocol.PhaseMap && k.PhaseDone >= 3 && a.Done >= 4 && a.Done < 60
	})
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // results pile up unmerged
	stopWorkers()
	<-done
	<-done
	st := legacyState{Corpus: "legacy-corpus", Keyed: keyed, Aggregate: agg, Blobs: map[string][]byte{}, Corpora: map[string][]byte{}, Meta: map[string]map[string]string{}}
	for _, c := range []struct {
		s   *store.Container
		dst map[string][]byte
	}{{r.st, st.Blobs}, {corpus, st.Corpora}} {
		list, err := c.s.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range list {
			data, _, err := c.s.Get(ctx, b.Name)
			if err != nil {
				t.Fatal(err)
			}
			c.dst[b.Name] = data
			if p, err := c.s.Props(ctx, b.Name); err == nil && len(p.Meta) > 0 {
				st.Meta[b.Name] = p.Meta
			}
		}
	}
	js, err := jetstream.New(r.b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	names := protocol.NewNames("mapagg")
	for _, s := range []struct {
		name string
		dst  *[]legacyMsg
	}{{names.ShardStream(), &st.Shards}, {names.ResultStream(), &st.Results}} {
		stream, err := js.Stream(ctx, s.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			*s.dst = append(*s.dst, legacyMsg{Subject: m.Subject, MsgID: m.Header.Get(jetstream.MsgIDHeader), Data: m.Data})
		}
	}
	k, _ := readRecord(r, keyed)
	a, _ := readRecord(r, agg)
	t.Logf("keyed %s: %s %d/%d; aggregate %s: %d/%d; %d blobs, %d shard messages, %d result messages",
		keyed, k.Phase, k.PhaseDone, k.PhaseTotal, agg, a.Done, a.Total, len(st.Blobs), len(st.Shards), len(st.Results))
	data, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
