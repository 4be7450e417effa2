package protocol

import "regexp"

// secretish matches what may carry a credential in an error text: URL query strings (SAS tokens)
// and the key/value pairs of a connection string.
var secretish = regexp.MustCompile(`(?i)(\?[^\s"']+)|((AccountKey|SharedAccessSignature|sig|password|token)=[^;\s"'&]+)`)

// Redact removes query strings and credential-like key/value pairs from s, for errors shown over
// HTTP or in events.
func Redact(s string) string { return secretish.ReplaceAllString(s, "[redacted]") }
