package flagstream

// #include "shim.h"
import "C"

import (
	"log"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Change is one revision the client applied: the keys of the flags it
// added, changed or removed. Missed is true (and Flags nil) when changes
// came faster than the listener took them: re-read whatever you cache.
type Change struct {
	// Revision is the new data revision (0 with Missed).
	Revision uint64
	// Flags are the keys of the flags added, changed or removed.
	Flags []string
	// Missed says changes were skipped.
	Missed bool
}

// listener is one registered change listener: a function, or a channel
// fed by the library's thread.
type listener struct {
	fn   func(Change) // nil for a channel listener
	ch   chan Change
	done chan struct{} // closed by shut: unblocks a send

	removed  atomic.Bool
	mu       sync.RWMutex // held (read) while a send is in progress
	finished bool         // under mu: ch was closed
	shutOnce sync.Once

	handle cgo.Handle
	// Guarded by the client's mu.
	id       uint64 // the library's id, 0 until registered
	stopping bool   // an unsubscribe owns its removal
}

// deliver passes one change on (called on a library thread, one call at
// a time per listener).
func (l *listener) deliver(c Change) {
	if l.removed.Load() {
		return
	}
	if l.fn != nil {
		defer func() {
			if p := recover(); p != nil {
				log.Printf("flagstream: a change listener panicked: %v", p)
			}
		}()
		l.fn(c)
		return
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.finished {
		return
	}
	select {
	case l.ch <- c:
	case <-l.done:
	}
}

// shut stops deliveries: no call of fn starts and no send happens after
// it, and a channel is closed (safe at any time, more than once).
func (l *listener) shut() {
	l.shutOnce.Do(func() {
		l.removed.Store(true)
		close(l.done)
		l.mu.Lock()
		l.finished = true
		if l.ch != nil {
			close(l.ch)
		}
		l.mu.Unlock()
	})
}

// OnChange calls fn for every change the client applies from now on, on
// a library thread, one call at a time and in order. fn must not block
// for long (it delays later changes: past the library's buffer they are
// reported as one Change with Missed) and must not call Close or an
// unsubscribe function synchronously (use `go unsubscribe()`); a panic in
// fn is recovered and logged. unsubscribe stops the calls: once it
// returns, fn is not running and is not called again; it is idempotent.
// On a closed client fn is never called and an error is returned. The
// library holds fn until Close or unsubscribe: if fn refers to the client
// (or to anything that does), the client stays reachable until then and
// its finalizer never runs, so Close it.
func (c *Client) OnChange(fn func(Change)) (unsubscribe func(), err error) {
	l := &listener{fn: fn, done: make(chan struct{})}
	if err := c.register(l); err != nil {
		return func() {}, err
	}
	return func() { c.unregister(l) }, nil
}

// Changes returns a channel that receives every change the client
// applies from now on (buffered with room for buffer changes; when the
// reader falls further behind, the library reports the skipped changes
// as one Change with Missed). stop (idempotent) unsubscribes and closes
// the channel; Close closes it too. On a closed client the channel is
// closed at once.
func (c *Client) Changes(buffer int) (changes <-chan Change, stop func()) {
	if buffer < 0 {
		buffer = 0
	}
	l := &listener{ch: make(chan Change, buffer), done: make(chan struct{})}
	if err := c.register(l); err != nil {
		return l.ch, func() {}
	}
	return l.ch, func() { c.unregister(l) }
}

// register makes l a listener of the library's client.
func (c *Client) register(l *listener) error {
	l.handle = cgo.NewHandle(l)
	c.mu.Lock()
	if c.closed.Load() || c.swept {
		c.mu.Unlock()
		l.handle.Delete()
		l.shut()
		return errClosed()
	}
	c.listeners[l] = struct{}{}
	c.mu.Unlock()
	r := C.fs_on_change(c.h(), C.uintptr_t(l.handle))
	runtime.KeepAlive(c)
	if err := errorOf(C.int(r.status), r.err); err != nil {
		// Never registered: the handle cannot be called.
		c.mu.Lock()
		delete(c.listeners, l)
		c.mu.Unlock()
		l.shut()
		l.handle.Delete()
		return err
	}
	c.mu.Lock()
	l.id = uint64(r.listener)
	if c.swept {
		// Close ran meanwhile and could not release this one: keep its
		// handle (the library may still hold it), end its deliveries.
		l.stopping = true
	}
	c.mu.Unlock()
	if l.stopping {
		l.shut()
	}
	return nil
}

// unregister stops l: the library removes it and returns after its last
// call; its handle then goes.
func (c *Client) unregister(l *listener) {
	l.shut()
	c.mu.Lock()
	if l.stopping || l.id == 0 || c.swept {
		// Another unsubscribe, a failed registration, or Close owns it.
		c.mu.Unlock()
		return
	}
	l.stopping = true
	delete(c.listeners, l)
	id := l.id
	c.mu.Unlock()
	r := C.fs_off_change(c.h(), C.uint64_t(id))
	runtime.KeepAlive(c)
	if errorOf(C.int(r.status), r.err) == nil {
		l.handle.Delete()
	}
	// Otherwise the client was closed meanwhile: the library's close
	// stops the listener; the handle (a few bytes) is kept, since this
	// goroutine cannot tell when the last call ended.
}

// changeOf copies a change the library passed (valid during the call).
func changeOf(revision C.uint64_t, flags *C.flagstream_str, count C.size_t, missed C.bool) Change {
	ch := Change{Revision: uint64(revision), Missed: bool(missed)}
	if count > 0 && flags != nil {
		strs := unsafe.Slice(flags, int(count))
		ch.Flags = make([]string, len(strs))
		for i, s := range strs {
			ch.Flags[i] = C.GoStringN((*C.char)(unsafe.Pointer(s.ptr)), C.int(s.len))
		}
	}
	return ch
}
