package flagstream

// #include "shim.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"unsafe"
)

// Context is the evaluation context (a user, an organisation, ...) kept
// by the library and reused across evaluations: evaluating it passes a
// pointer, so build it once per request (or once per long-lived subject)
// and evaluate many flags with it.
//
// Any number of goroutines may evaluate with one Context at the same time,
// but a Context must not be changed (Set*, Close) while another goroutine
// evaluates with it or changes it. Close frees it; a finalizer frees a
// Context that was not closed once it is unreachable.
type Context struct {
	ptr *C.flagstream_context
}

// NewContext makes a single-kind context of kind "user" with key. Its
// attributes are set with the Set methods.
func NewContext(key string) (*Context, error) {
	r := C.fs_context_new(bytesOf(key), sizeOf(key))
	if err := errorOf(C.int(r.status), r.err); err != nil {
		return nil, err
	}
	return newContext(r.context), nil
}

// ContextFromJSON makes a context from its JSON form: one kind,
//
//	{"key": "u1", "kind": "user", "attributes": {"plan": "pro", "seats": 12}}
//
// or several,
//
//	{"kind": "multi", "contexts": [{"key": "u1"}, {"key": "o1", "kind": "org"}]}
//
// (the Set methods refuse a multi-kind context).
func ContextFromJSON(data []byte) (*Context, error) {
	r := C.fs_context_from_json(bytesOfSlice(data), C.size_t(len(data)))
	if err := errorOf(C.int(r.status), r.err); err != nil {
		return nil, err
	}
	return newContext(r.context), nil
}

func newContext(p *C.flagstream_context) *Context {
	x := &Context{ptr: p}
	runtime.SetFinalizer(x, (*Context).Close)
	return x
}

// handle is the library's pointer as C's uintptr_t (0 for a nil or
// closed Context: the library then refuses the call by name).
func (x *Context) handle() C.uintptr_t {
	if x == nil {
		return 0
	}
	return C.uintptr_t(uintptr(unsafe.Pointer(x.ptr)))
}

// SetString sets (or replaces) a string attribute. The names "key" and
// "kind" are not attributes: they are ignored.
func (x *Context) SetString(name, value string) error {
	r := C.fs_context_set_string(x.handle(), bytesOf(name), sizeOf(name), bytesOf(value), sizeOf(value))
	runtime.KeepAlive(x)
	return errorOf(C.int(r.status), r.err)
}

// SetNumber sets (or replaces) a number attribute.
func (x *Context) SetNumber(name string, value float64) error {
	r := C.fs_context_set_number(x.handle(), bytesOf(name), sizeOf(name), C.double(value))
	runtime.KeepAlive(x)
	return errorOf(C.int(r.status), r.err)
}

// SetBool sets (or replaces) a bool attribute.
func (x *Context) SetBool(name string, value bool) error {
	r := C.fs_context_set_bool(x.handle(), bytesOf(name), sizeOf(name), C.bool(value))
	runtime.KeepAlive(x)
	return errorOf(C.int(r.status), r.err)
}

// Set sets (or replaces) an attribute from any value encoding/json
// encodes: a string, a number, a bool, or a slice of those (an object is
// kept too, as an attribute that is present but matches no clause). A
// nil value removes the attribute. A json.RawMessage is passed as it is.
func (x *Context) Set(name string, value any) error {
	js, err := json.Marshal(value)
	if err != nil {
		return invalidf("attribute %q: %v", name, err)
	}
	r := C.fs_context_set_json(x.handle(), bytesOf(name), sizeOf(name), bytesOfSlice(js), C.size_t(len(js)))
	runtime.KeepAlive(x)
	return errorOf(C.int(r.status), r.err)
}

// Close frees the context; later uses of it are refused with
// ErrInvalidArgument (an evaluation returns its default). Closing twice
// is harmless.
func (x *Context) Close() {
	if x == nil || x.ptr == nil {
		return
	}
	C.flagstream_context_free(x.ptr)
	x.ptr = nil
	runtime.SetFinalizer(x, nil)
}
