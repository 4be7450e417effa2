package membership

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

func TestClaim_SecondProcessWithTheSameIDIsRefused(t *testing.T) {
	u := testenv.NATS(t)
	conn := func() *nats.Conn {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	first, second := conn(), conn()
	started := time.Now()
	release, err := Claim(first, "p", Holder{ID: "w 1", Instance: "a", StartedAt: started, HTTPAddr: "127.0.0.1:9"}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Claim(second, "p", Holder{ID: "w 1", Instance: "b", StartedAt: time.Now()}, 200*time.Millisecond)
	var dup *DuplicateIDError
	if !errors.As(err, &dup) || !errors.Is(err, ErrDuplicateID) || dup.ID != "w 1" || !strings.Contains(err.Error(), `"w 1"`) || !strings.Contains(err.Error(), "127.0.0.1:9") {
		t.Fatalf("second claim: %v, want a DuplicateIDError naming the id and the holder", err)
	}
	// Another id, or the same id once released, is free.
	r2, err := Claim(second, "p", Holder{ID: "w 2", Instance: "b"}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r2()
	release()
	if err := first.Flush(); err != nil {
		t.Fatal(err)
	}
	r3, err := Claim(second, "p", Holder{ID: "w 1", Instance: "b"}, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	r3()
}

func FuzzDecodeHolder(f *testing.F) {
	f.Add([]byte(`{"id":"w1","instance":"ab12","started_at":"2026-01-02T03:04:05Z","http_addr":"127.0.0.1:9"}`))
	f.Add([]byte(`{"id":"","instance":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHolder(data)
		if err != nil {
			return
		}
		if h.ID == "" || h.Instance == "" {
			t.Fatalf("accepted %+v", h)
		}
	})
}
