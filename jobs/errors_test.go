package jobs_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

func TestPermanent_Matches(t *testing.T) {
	base := fmt.Errorf("record 7: %w", io.ErrUnexpectedEOF)
	err := fmt.Errorf("map: %w", jobs.Permanent(base))
	if !errors.Is(err, jobs.ErrPermanent) {
		t.Errorf("%v does not match ErrPermanent", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("%v does not unwrap to the marked error", err)
	}
	var pe *jobs.PermanentError
	if !errors.As(err, &pe) || pe.Err != base {
		t.Errorf("errors.As: %v", pe)
	}
	if err.Error() != "map: record 7: unexpected EOF" {
		t.Errorf("Error() = %q", err.Error())
	}
	if errors.Is(base, jobs.ErrPermanent) {
		t.Error("an unmarked error matches ErrPermanent")
	}
	if jobs.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
}
