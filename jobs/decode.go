package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// DecodeParams decodes a job's JSON parameters into dst, a pointer to a struct whose fields carry
// json tags, the way every job's parameters are decoded (Typed calls it for you). It refuses, with
// a *ParamError of job naming the field at fault:
//
//   - anything but one JSON object (empty input and null count as {}), or more than MaxSpecBytes;
//   - unknown fields, matched exactly ("To" is not "to", as it would be for encoding/json), with
//     the list of allowed fields;
//   - values of the wrong type (`"shards" must be an integer (got string)`);
//   - absent or null fields tagged `jobs:"required"`. If the struct has a method Usage() string,
//     its result (an example of good parameters) is added to that error.
//
// It returns the set of fields present with a non-null value, so a caller can default the others.
func DecodeParams(job string, raw json.RawMessage, dst any) (present map[string]bool, err error) {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("decode parameters of %s: want a pointer to a struct, got %T", job, dst)
	}
	if len(raw) > MaxSpecBytes {
		return nil, badParam(job, "", "parameters are %d bytes, the limit is %d", len(raw), MaxSpecBytes)
	}
	usage := ""
	if u, ok := dst.(interface{ Usage() string }); ok {
		usage = "; usage: " + u.Usage()
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, badParam(job, "", "parameters must be a JSON object (got %s)%s", typeErr.Value, usage)
		}
		return nil, badParam(job, "", "parameters are not valid JSON: %v", err)
	}
	if fields == nil { // the JSON was null
		fields = map[string]json.RawMessage{}
	}
	allowed, required := jsonFields(t.Elem())
	for name := range fields {
		if !allowed[name] {
			return nil, badParam(job, name, "unknown field %q; allowed fields: %s", name, joinSorted(allowed))
		}
	}
	present = make(map[string]bool, len(fields))
	for name, v := range fields {
		if !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			present[name] = true
		}
	}
	for _, name := range required {
		if !present[name] {
			return nil, badParam(job, name, "%q is required%s", name, usage)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// Field is a path such as "opts.x", or "Embedded.x" for a field of an embedded
			// struct: name the first element that is a parameter.
			field := typeErr.Field
			for _, f := range strings.Split(typeErr.Field, ".") {
				if allowed[f] {
					field = f
					break
				}
			}
			want, got := typeErr.Type, typeErr.Value
			if ft := jsonFieldType(t.Elem(), field); ft != nil && ft != want {
				want, got = ft, got+" in the list" // an element of a list field
			}
			return nil, badParam(job, field, "%q must be %s (got %s)", field, describeType(want), got)
		}
		return nil, badParam(job, "", "parameters could not be decoded: %v", err)
	}
	return present, nil
}

func badParam(job, field, format string, args ...any) *ParamError {
	return &ParamError{Job: job, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// jsonFields returns the JSON names of the exported fields of struct type t (with those of
// embedded structs without a JSON name, as encoding/json promotes them), and those of them tagged
// `jobs:"required"`, in field order.
func jsonFields(t reflect.Type) (names map[string]bool, required []string) {
	names = make(map[string]bool, t.NumField())
	walkFields(t, func(name string, f reflect.StructField) {
		names[name] = true
		if f.Tag.Get("jobs") == "required" {
			required = append(required, name)
		}
	})
	return names, required
}

// walkFields calls fn with the JSON name of each field of struct type t that encoding/json
// decodes, descending into embedded structs that have no JSON name.
func walkFields(t reflect.Type, fn func(name string, f reflect.StructField)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walkFields(ft, fn)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fn(name, f)
	}
}

// jsonFieldType returns the type of the field of struct type t whose JSON name is name.
func jsonFieldType(t reflect.Type, name string) reflect.Type {
	var typ reflect.Type
	walkFields(t, func(n string, f reflect.StructField) {
		if n == name && typ == nil {
			typ = f.Type
		}
	})
	return typ
}

func joinSorted(set map[string]bool) string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// describeType names what a JSON value must be to decode into t.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	default:
		return "a " + t.String()
	}
}
