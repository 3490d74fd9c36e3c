package flagstream

// The C side of the package: where the header and the static library are
// found, and Go helpers around the C wrappers of shim.h.

/*
#cgo CFLAGS: -I${SRCDIR}/../ffi/include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -l:libflagstream_ffi.a -lm -ldl -lpthread -static-libgcc

#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// bytesOf is the address of s's bytes, for C to read during one call
// without a copy and without an allocation (Go 1.19 has no
// unsafe.StringData: the string header's first word is read). The
// library reads them during the call only and keeps nothing; the pointer
// passed keeps them alive meanwhile. The bytes contain no Go pointer, so
// cgo's pointer check has nothing to check.
func bytesOf(s string) *C.uint8_t {
	return (*C.uint8_t)(*(*unsafe.Pointer)(unsafe.Pointer(&s)))
}

// sizeOf is len(s) as a C size.
func sizeOf(s string) C.size_t { return C.size_t(len(s)) }

// bytesOfSlice is the address of b's first byte (nil when empty).
func bytesOfSlice(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

// textBufSize is the size of the pooled buffers text results are copied
// into: longer ones take a second call.
const textBufSize = 512

var textBufs = sync.Pool{New: func() any { return new([textBufSize]byte) }}

// takeText turns a text result into Go bytes (copied) and returns
// everything the library still owned.
func takeText(r *C.fs_text_ret, buf *[textBufSize]byte) []byte {
	n := int(r.len)
	if r.big.ptr != nil {
		out := C.GoBytes(unsafe.Pointer(r.big.ptr), C.int(n))
		C.flagstream_string_free(r.big)
		return out
	}
	out := make([]byte, n)
	copy(out, buf[:n])
	return out
}

// takeTextString is takeText for a string result (one allocation).
func takeTextString(r *C.fs_text_ret, buf *[textBufSize]byte) string {
	n := int(r.len)
	if r.big.ptr != nil {
		out := C.GoStringN((*C.char)(unsafe.Pointer(r.big.ptr)), C.int(n))
		C.flagstream_string_free(r.big)
		return out
	}
	return string(buf[:n])
}

// errorOf turns a status and its copied message into an error (nil for
// OK), freeing the message.
func errorOf(status C.int, e C.fs_err) error {
	var msg string
	if e.ptr != nil {
		msg = C.GoStringN(e.ptr, C.int(e.len))
		C.free(unsafe.Pointer(e.ptr))
	}
	if status == C.FLAGSTREAM_STATUS_OK {
		return nil
	}
	return &Error{Status: Status(status), Message: msg}
}
