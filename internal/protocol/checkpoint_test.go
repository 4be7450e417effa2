package protocol

import "testing"

// A checkpoint of an earlier build (no writer_term) still decodes, with an empty WriterTerm.
func TestDecodeCheckpoint_EarlierBuildWithoutWriterTerm(t *testing.T) {
	old := `{"version":1,"job":"j1","type":"sleep","state":"running","plan_epoch":2,"writer_epoch":3,"total":4,"done_count":0,"dispatched":4,"seq":5}`
	cp, err := DecodeCheckpoint([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if cp.WriterTerm != "" || cp.WriterEpoch != 3 {
		t.Fatalf("decoded %+v", cp)
	}
	cp.WriterTerm = "abc"
	data, _ := cp.Encode()
	back, err := DecodeCheckpoint(data)
	if err != nil || back.WriterTerm != "abc" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
