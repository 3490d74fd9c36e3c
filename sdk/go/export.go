package flagstream

// This file's preamble may only declare (it has an //export): the
// trampoline that calls fsGoOnChange is in shim.h.

// #include "flagstream.h"
import "C"

import "runtime/cgo"

// fsGoOnChange is called by the library (through shim.h's trampoline) on
// its own thread for each change, with the listener's cgo.Handle as its
// user data.
//
//export fsGoOnChange
func fsGoOnChange(handle C.uintptr_t, revision C.uint64_t, flags *C.flagstream_str, count C.size_t, missed C.bool) {
	l, ok := cgo.Handle(handle).Value().(*listener)
	if !ok {
		return
	}
	l.deliver(changeOf(revision, flags, count, missed))
}
