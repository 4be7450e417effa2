package protocol

import (
	"strconv"
	"unicode/utf8"
)

// Clip returns s whole when it is at most n bytes, else its first n bytes (cut at a rune
// boundary) followed by "…(<len> bytes)". It is for echoing outside input (a queue message, a
// job id, a subject) in logs, dead-letter reasons and errors without copying a hostile string.
func Clip(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// ClipLen is the length to which outside input is clipped where it is echoed.
const ClipLen = 128
