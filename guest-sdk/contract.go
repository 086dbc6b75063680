package fleet

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// PoolContract names a pool and the Go types of its items: P the payload, T the tags.
// Declare it once, in a package that producers and consumers both import, and make it
// with NewPool (the zero value names no pool):
//
//	var Cookies = fleet.NewPool[CfCookie, CfCookieTags]("cookies")
type PoolContract[P, T any] struct {
	name string // immutable after construction
}

// NewPool declares the pool name with payload type P and tags type T.
//
// T must be a struct of scalar fields (string, bool, integers): tags are the indexed,
// equality-filterable labels of an item, and a Where filter names them by their JSON
// names. P may be any type that encoding/json round-trips.
//
// NewPool panics when name is not 1..200 bytes of letters, digits and -_.:/@=+, or when
// a type breaks these rules: it is called once, from a package variable, so a mistake
// shows at start-up with the reason.
func NewPool[P, T any](name string) PoolContract[P, T] {
	mustName("NewPool", "pool", name)
	mustPayloadType("NewPool", "pool "+name+" payload", reflect.TypeFor[P]())
	mustTagsType("NewPool", name, reflect.TypeFor[T]())
	return PoolContract[P, T]{name: name}
}

// Name is the pool's name.
func (c PoolContract[P, T]) Name() string { return c.name }

// Ref is the pool as a registration lists it: Plugin{Pools: []fleet.PoolRef{c.Ref()}}.
func (c PoolContract[P, T]) Ref() PoolRef {
	return PoolRef{name: c.name, payload: reflect.TypeFor[P](), tags: reflect.TypeFor[T]()}
}

// PoolRef is a pool contract without its type parameters, for Plugin.Pools.
type PoolRef struct {
	name          string
	payload, tags reflect.Type
}

// QueueContract names a task queue and the Go type of its tasks' payloads. Declare it
// once, in a package that submitters and the consumer both import, and make it with
// NewQueue (the zero value names no queue):
//
//	var Harvest = fleet.NewQueue[HarvestRequest]("harvest")
type QueueContract[P any] struct {
	name string // immutable after construction
}

// NewQueue declares the queue name with payload type P. It panics when name is not 1..200
// bytes of letters, digits and -_.:/@=+, or P cannot be described (a channel, a function,
// a recursive type).
func NewQueue[P any](name string) QueueContract[P] {
	mustName("NewQueue", "queue", name)
	mustPayloadType("NewQueue", "queue "+name+" payload", reflect.TypeFor[P]())
	return QueueContract[P]{name: name}
}

// Name is the queue's name.
func (q QueueContract[P]) Name() string { return q.name }

// Ref is the queue as a registration lists it: Plugin{Submits: []fleet.QueueRef{q.Ref()}}.
func (q QueueContract[P]) Ref() QueueRef {
	return QueueRef{name: q.name, payload: reflect.TypeFor[P]()}
}

// QueueRef is a queue contract without its type parameter, for Plugin.Submits.
type QueueRef struct {
	name    string
	payload reflect.Type
}

func mustName(fn, what, name string) {
	if err := checkName(what, name); err != nil {
		panic("fleet: " + fn + ": " + err.Error())
	}
}

// checkName is the names rule of the primitives: 1..200 bytes of letters, digits and
// -_.:/@=+.
func checkName(what, name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("%s name %q must be 1..200 bytes", what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:/@=+", c) >= 0 {
			continue
		}
		return fmt.Errorf("%s name %q has byte %q; allowed are letters, digits and -_.:/@=+", what, name, c)
	}
	return nil
}

func mustPayloadType(fn, what string, t reflect.Type) {
	if err := checkDescribable(t, nil); err != nil {
		panic(fmt.Sprintf("fleet: %s: %s type %v cannot be described: %v", fn, what, t, err))
	}
}

func mustTagsType(fn, pool string, t reflect.Type) {
	if err := checkTags(t); err != nil {
		panic(fmt.Sprintf("fleet: %s: pool %s tags type %v: %v", fn, pool, t, err))
	}
}

// checkTags requires a flat struct of scalar fields with valid JSON names.
func checkTags(t reflect.Type) error {
	if t == nil || t.Kind() != reflect.Struct {
		return fmt.Errorf("must be a struct of string, bool or integer fields, not a %v", kindOf(t))
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			return fmt.Errorf("field %s is embedded; tags must be a flat struct", f.Name)
		}
		name, ok := jsonName(f)
		if !ok {
			continue
		}
		switch f.Type.Kind() {
		case reflect.String, reflect.Bool,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			return fmt.Errorf("field %s is a %v; tags must be string, bool or integer", f.Name, f.Type)
		}
		if err := checkName("tag", name); err != nil {
			return fmt.Errorf("field %s: %v", f.Name, err)
		}
	}
	return nil
}

func kindOf(t reflect.Type) string {
	if t == nil {
		return "interface"
	}
	return t.Kind().String()
}

// jsonName is the name encoding/json gives the field, and false when it skips it.
func jsonName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name, true
	}
	return f.Name, true
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// checkDescribable refuses types that JSON cannot carry or that the schema generator
// cannot describe: channels, functions, complex numbers, unsafe pointers, maps with
// non-string keys, and recursive types (which a self-contained schema cannot express).
// Types that marshal themselves are taken as they are.
func checkDescribable(t reflect.Type, path []reflect.Type) error {
	if t == nil || t.Kind() == reflect.Interface { // such as any: any JSON value
		return nil
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return nil
	}
	for _, p := range path {
		if p == t {
			return fmt.Errorf("%v is recursive; contracts need types of finite depth", t)
		}
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return checkDescribable(t.Elem(), append(path, t))
	case reflect.Map:
		k := t.Key()
		switch {
		case k.Kind() == reflect.String,
			k.Kind() >= reflect.Int && k.Kind() <= reflect.Uint64:
		case k.Implements(textMarshaler):
		default:
			return fmt.Errorf("map key type %v is not a string or integer", k)
		}
		return checkDescribable(t.Elem(), append(path, t))
	case reflect.Struct:
		path = append(path, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if _, ok := jsonName(f); !ok && !f.Anonymous {
				continue
			}
			if err := checkDescribable(f.Type, path); err != nil {
				return fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		return nil
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer, reflect.Uintptr:
		return fmt.Errorf("%v is a %v, which a JSON Schema cannot describe", t, t.Kind())
	}
	return nil
}
