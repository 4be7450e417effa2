package jobs

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// codec encodes the shards or the partials of a typed job: with the type's own
// MarshalBinary/UnmarshalBinary when T has them (UnmarshalBinary on *T), otherwise as JSON,
// decoded strictly (unknown fields and trailing data refused). max bounds an encoding (0: none).
type codec[T any] struct {
	binary bool
	max    int
}

func newCodec[T any](max int) codec[T] {
	var v T
	_, m := any(v).(encoding.BinaryMarshaler)
	_, u := any(&v).(encoding.BinaryUnmarshaler)
	return codec[T]{binary: m && u, max: max}
}

func (c codec[T]) encode(v T) ([]byte, error) {
	var b []byte
	if c.binary {
		var err error
		if b, err = any(v).(encoding.BinaryMarshaler).MarshalBinary(); err != nil {
			return nil, err
		}
	} else {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			var uv *json.UnsupportedValueError
			if errors.As(err, &uv) {
				return nil, fmt.Errorf("%w (JSON holds no NaN or ±Inf: use a flag or a bound instead, or give the type MarshalBinary/UnmarshalBinary)", err)
			}
			return nil, err
		}
		b = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	if c.max > 0 && len(b) > c.max {
		return nil, fmt.Errorf("%d bytes, the limit is %d", len(b), c.max)
	}
	return b, nil
}

func (c codec[T]) decode(data []byte) (T, error) {
	var v T
	if c.max > 0 && len(data) > c.max {
		return v, fmt.Errorf("%d bytes, the limit is %d", len(data), c.max)
	}
	if c.binary {
		err := any(&v).(encoding.BinaryUnmarshaler).UnmarshalBinary(data)
		return v, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var zero T
		return zero, err
	}
	if _, err := dec.Token(); err != io.EOF {
		var zero T
		return zero, errors.New("trailing data after the JSON value")
	}
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Array {
		// encoding/json drops the elements past a Go array's length, and zeroes the missing.
		var elems []json.RawMessage
		if err := json.Unmarshal(data, &elems); err == nil && elems != nil && len(elems) != t.Len() {
			var zero T
			return zero, fmt.Errorf("a list of %d elements, want %d", len(elems), t.Len())
		}
	}
	return v, nil
}
