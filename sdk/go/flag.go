package flagstream

// #include "shim.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"unsafe"
)

// Flag is a handle on one flag of a client: its key is looked up once, so
// a hot path evaluates it without passing the key. It is safe for
// concurrent use; a finalizer frees it once it is unreachable.
type Flag struct {
	client *Client
	key    string
	ptr    *C.flagstream_flag
	err    error // the handle could not be made (a key that is not UTF-8)
}

// Flag returns a handle on flag key. A flag that does not exist (yet)
// evaluates to the default until it does.
func (c *Client) Flag(key string) *Flag {
	f := &Flag{client: c, key: key}
	r := C.fs_flag_new(bytesOf(key), sizeOf(key))
	if err := errorOf(C.int(r.status), r.err); err != nil {
		f.err = err
		return f
	}
	f.ptr = r.flag
	runtime.SetFinalizer(f, (*Flag).free)
	return f
}

// h is the handle as C's uintptr_t (see Client.h).
func (f *Flag) h() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(f.ptr))) }

func (f *Flag) free() {
	C.flagstream_flag_free(f.ptr)
	f.ptr = nil
}

// Key is the flag's key.
func (f *Flag) Key() string { return f.key }

// failed is the detail of an evaluation through a handle that could not
// be made.
func (f *Flag) failed() Detail { return failedDetail(f.err) }

// Bool evaluates the flag as a bool (as Client.Bool). No allocation.
func (f *Flag) Bool(x *Context, def bool) bool {
	r := C.fs_bool_flag(f.client.h(), f.h(), x.handle(), C.bool(def))
	runtime.KeepAlive(f)
	runtime.KeepAlive(f.client)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return bool(r.value)
}

// BoolDetail is Bool with the evaluation's Detail.
func (f *Flag) BoolDetail(x *Context, def bool) (bool, Detail) {
	if f.err != nil {
		return def, f.failed()
	}
	v, d := f.client.boolDetail("", f.h(), x, def)
	runtime.KeepAlive(f)
	return v, d
}

// Int evaluates the flag as an integer (as Client.Int).
func (f *Flag) Int(x *Context, def int64) int64 {
	r := C.fs_int_flag(f.client.h(), f.h(), x.handle(), C.int64_t(def))
	runtime.KeepAlive(f)
	runtime.KeepAlive(f.client)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return int64(r.value)
}

// IntDetail is Int with the evaluation's Detail.
func (f *Flag) IntDetail(x *Context, def int64) (int64, Detail) {
	if f.err != nil {
		return def, f.failed()
	}
	v, d := f.client.intDetail("", f.h(), x, def)
	runtime.KeepAlive(f)
	return v, d
}

// Float evaluates the flag as a number (as Client.Float).
func (f *Flag) Float(x *Context, def float64) float64 {
	r := C.fs_float_flag(f.client.h(), f.h(), x.handle(), C.double(def))
	runtime.KeepAlive(f)
	runtime.KeepAlive(f.client)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return float64(r.value)
}

// FloatDetail is Float with the evaluation's Detail.
func (f *Flag) FloatDetail(x *Context, def float64) (float64, Detail) {
	if f.err != nil {
		return def, f.failed()
	}
	v, d := f.client.floatDetail("", f.h(), x, def)
	runtime.KeepAlive(f)
	return v, d
}

// String evaluates the flag as a string (as Client.String).
func (f *Flag) String(x *Context, def string) string {
	if f.err != nil {
		return def
	}
	s, _, _ := f.client.text(textString, "", f.h(), x, def, false)
	runtime.KeepAlive(f)
	return s
}

// StringDetail is String with the evaluation's Detail.
func (f *Flag) StringDetail(x *Context, def string) (string, Detail) {
	if f.err != nil {
		return def, f.failed()
	}
	s, d, _ := f.client.text(textString, "", f.h(), x, def, true)
	runtime.KeepAlive(f)
	return s, d
}

// JSON evaluates the flag as JSON (as Client.JSON).
func (f *Flag) JSON(x *Context, def json.RawMessage) json.RawMessage {
	if f.err != nil {
		return def
	}
	s, _, ok := f.client.text(textJSON, "", f.h(), x, jsonDefault(def), false)
	runtime.KeepAlive(f)
	if !ok {
		return def
	}
	return json.RawMessage(s)
}

// JSONDetail is JSON with the evaluation's Detail.
func (f *Flag) JSONDetail(x *Context, def json.RawMessage) (json.RawMessage, Detail) {
	if f.err != nil {
		return def, f.failed()
	}
	v, d := f.client.jsonDetail("", f.h(), x, def)
	runtime.KeepAlive(f)
	return v, d
}
