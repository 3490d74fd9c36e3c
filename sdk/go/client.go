package flagstream

// #include "shim.h"
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ABIVersion is the version of the C ABI this package is written for.
// NewClient refuses a library that implements another one.
const ABIVersion = 1

// DefaultCloseTimeout is how long Close waits for the last usage counts
// to reach the relay when its context has no deadline.
const DefaultCloseTimeout = 2 * time.Second

// Client evaluates flags locally from the data a relay streams to it (or
// from test data or a flag file). It is safe for concurrent use by any
// number of goroutines. Close it when done: Close ends its stream and
// sends its last usage counts; its memory is released when it is garbage
// collected (a finalizer frees the library's handle, so evaluations racing
// Close never touch freed memory). A client dropped without Close is
// closed by that finalizer, in a goroutine of its own. A function passed
// to OnChange that refers to the client keeps the client reachable (the
// library holds the function) until Close or its unsubscribe: such a
// client is never finalized, so Close it.
type Client struct {
	ptr    *C.flagstream_client
	closed atomic.Bool // Close began

	mu        sync.Mutex
	listeners map[*listener]struct{}
	swept     bool // Close (or the finalizer) released the listeners
	closeOK   bool // the library's close returned OK (listeners stopped)
}

// LibraryABIVersion is the ABI version of the linked library
// (flagstream_abi_version): ABIVersion when it matches this package.
func LibraryABIVersion() uint32 { return uint32(C.flagstream_abi_version()) }

var abiChecked struct {
	once sync.Once
	err  error
}

// checkABI compares the linked library's ABI version with the header's
// and this package's.
func checkABI() error {
	abiChecked.once.Do(func() {
		lib := uint32(C.flagstream_abi_version())
		header := uint32(C.FLAGSTREAM_ABI_VERSION)
		if header != ABIVersion {
			abiChecked.err = &Error{Status: StatusInternal, Message: fmt.Sprintf(
				"flagstream.h declares ABI version %d, this Go package is written for %d: use the header of the same checkout", header, ABIVersion)}
		} else if lib != ABIVersion {
			abiChecked.err = &Error{Status: StatusInternal, Message: fmt.Sprintf(
				"the linked libflagstream_ffi implements ABI version %d, this Go package needs %d: rebuild it from the same checkout (cargo build --release -p flagstream-ffi)", lib, ABIVersion)}
		}
	})
	return abiChecked.err
}

// NewClient makes a client. With Endpoints and SDKKey it connects in the
// background: call WaitReady before relying on its flags (until then
// evaluations return their defaults, counted in Stats as not ready).
// A wrong option returns an error naming it (errors.Is(err,
// ErrInvalidArgument)).
func NewClient(o Options) (*Client, error) {
	if err := checkABI(); err != nil {
		return nil, err
	}
	js, err := o.toJSON()
	if err != nil {
		return nil, err
	}
	r := C.fs_client_new(bytesOfSlice(js), C.size_t(len(js)))
	if err := errorOf(C.int(r.status), r.err); err != nil {
		return nil, err
	}
	c := &Client{ptr: r.client, listeners: map[*listener]struct{}{}}
	runtime.SetFinalizer(c, (*Client).finalize)
	return c, nil
}

// NewTestDataClient serves flags, no relay: a flag set as YAML or JSON
// text ({"flags": [...], "segments": [...]}), validated first. It is ready
// at once.
func NewTestDataClient(flags string) (*Client, error) {
	return NewClient(Options{TestData: flags})
}

// NewOfflineClient serves the flags of a file (YAML or JSON), no relay.
func NewOfflineClient(path string) (*Client, error) {
	return NewClient(Options{OfflineFile: path})
}

// h is the library's handle as C's uintptr_t: the wrappers of shim.h take
// handles (C memory) as integers, so cgo adds no pointer check to the call,
// which would cost an allocation per argument.
func (c *Client) h() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(c.ptr))) }

// finalize frees the library's handle once the client is unreachable
// (closing it first, as flagstream_client_free does, if Close was not
// called). It runs on the runtime's one finalizer goroutine, shared by
// every finalizer of the process, so it must never block: it stops the
// listeners' deliveries first (as Close does: a channel listener blocked
// on a full channel lets go, since the library's close waits for every
// callback to return), then leaves the free itself, which can wait up to
// 2 s for the last usage counts and for a listener's call in progress,
// to a goroutine of its own.
func (c *Client) finalize() {
	c.mu.Lock()
	// free stops the listeners when it closes the client itself, or an
	// earlier Close did; after a failed Close they may still be called,
	// so their handles are kept (Close emptied the set anyway).
	release := !c.swept || c.closeOK
	var handles []cgo.Handle
	for l := range c.listeners {
		l.shut()
		if release && l.id != 0 && !l.stopping {
			handles = append(handles, l.handle)
		}
	}
	c.listeners = nil
	c.swept = true
	c.mu.Unlock()
	go freeClient(c.ptr, handles)
}

// freeClient frees a client's handle (closing it first if needed: every
// listener stopped once it returns), then the handles of the listeners it
// stopped. It is given what it needs, not the Client, which is already
// unreachable.
func freeClient(ptr *C.flagstream_client, handles []cgo.Handle) {
	C.flagstream_client_free(ptr)
	for _, h := range handles {
		h.Delete()
	}
}

// WaitReady waits until the client has data (from a relay, its cache,
// test data or a file), or until ctx ends: then it returns an error
// matching ErrTimeout that also wraps ctx.Err(). It keeps trying in the
// background either way. On a closed client it returns ErrClosed.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		step := 100 * time.Millisecond
		if ctx.Done() == nil {
			step = time.Second // ctx never ends: no need to look often
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := time.Until(deadline); left < step {
				step = left
			}
		}
		if step < 0 || ctx.Err() != nil {
			step = 0
		}
		r := C.fs_client_wait_ready(c.h(), C.uint64_t(step.Milliseconds()))
		runtime.KeepAlive(c)
		err := errorOf(C.int(r.status), r.err)
		if err == nil {
			return nil
		}
		if !isStatus(err, StatusTimeout) {
			return err
		}
		if state, _, serr := c.Status(); serr == nil && state == StateFailed {
			return &Error{Status: StatusTimeout, Message: "the client failed permanently (for example its SDK key was revoked)"}
		}
		if cerr := ctx.Err(); cerr != nil {
			return &Error{Status: StatusTimeout, Message: "no data yet: " + cerr.Error(), cause: cerr}
		}
	}
}

func isStatus(err error, s Status) bool {
	e, ok := err.(*Error)
	return ok && e.Status == s
}

// Close ends the client's stream and sends its last usage counts, waiting
// for them until ctx's deadline (DefaultCloseTimeout without one; Close
// cannot be interrupted otherwise). It stops every change listener (their
// channels are closed). Later calls on the client return ErrClosed, and
// evaluations their defaults. A second Close returns ErrClosed. It must
// not be called from inside a change listener.
func (c *Client) Close(ctx context.Context) error {
	if !c.closed.CompareAndSwap(false, true) {
		return errClosed()
	}
	timeout := DefaultCloseTimeout
	if ctx == nil {
		ctx = context.Background()
	}
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
		if timeout < 0 {
			timeout = 0
		}
	}
	// Channel listeners blocked on a full channel let go first: the
	// library's close waits for every callback to return.
	c.mu.Lock()
	for l := range c.listeners {
		l.shut()
	}
	c.mu.Unlock()
	r := C.fs_client_close(c.h(), C.uint64_t(timeout.Milliseconds()))
	runtime.KeepAlive(c)
	err := errorOf(C.int(r.status), r.err)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.swept = true
	c.closeOK = err == nil
	if err == nil {
		// The library stopped every listener it had: their handles can
		// go (not those an unsubscribe is stopping: it deletes its own).
		for l := range c.listeners {
			if l.id != 0 && !l.stopping {
				l.handle.Delete()
			}
		}
	}
	c.listeners = map[*listener]struct{}{}
	return err
}

// Closed reports whether Close was called.
func (c *Client) Closed() bool { return c.closed.Load() }

// State is a client's state.
type State int

// The client states.
const (
	// StateInitializing: no data yet.
	StateInitializing State = 0
	// StateReady: serving current data.
	StateReady State = 1
	// StateStale: serving data that may be out of date (from the cache,
	// or the stream is down past StaleAfter).
	StateStale State = 2
	// StateFailed: a permanent error (for example a revoked SDK key).
	StateFailed State = 3
	// StateClosed: Close was called.
	StateClosed State = 4
)

// String is the state's name in lower case.
func (s State) String() string {
	switch s {
	case StateInitializing:
		return "initializing"
	case StateReady:
		return "ready"
	case StateStale:
		return "stale"
	case StateFailed:
		return "failed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state %d", int(s))
}

// Status returns the client's state and the revision of its data (0
// without data). On a closed client: StateClosed and ErrClosed.
func (c *Client) Status() (State, uint64, error) {
	r := C.fs_client_status(c.h())
	runtime.KeepAlive(c)
	if err := errorOf(C.int(r.status), r.err); err != nil {
		if isStatus(err, StatusClosed) {
			return StateClosed, 0, err
		}
		return StateInitializing, 0, err
	}
	return State(r.state), uint64(r.revision), nil
}

// Stats are the client's counters since it was made.
type Stats struct {
	// DefaultNotFound counts evaluations that returned the default: no
	// such flag.
	DefaultNotFound uint64
	// DefaultNotReady counts defaults returned because there was no data
	// yet.
	DefaultNotReady uint64
	// DefaultWrongType counts defaults returned because the flag has
	// another type.
	DefaultWrongType uint64
	// DefaultMalformed counts defaults returned because the flag was
	// malformed.
	DefaultMalformed uint64
	// Connects counts streams opened.
	Connects uint64
	// Reconnects counts streams that ended and were reopened.
	Reconnects uint64
	// EndpointSwitches counts moves to another endpoint.
	EndpointSwitches uint64
	// Stalls counts streams found stalled (watchdog or keepalive).
	Stalls uint64
	// Resyncs counts full snapshots requested after a failed apply.
	Resyncs uint64
	// ChecksumMismatches counts checksum mismatches detected.
	ChecksumMismatches uint64
	// DivergedHeads counts heartbeats naming the client's revision with
	// another checksum.
	DivergedHeads uint64
	// RetryHints counts refusals that carried a retry-after hint.
	RetryHints uint64
	// SnapshotsApplied counts snapshots applied.
	SnapshotsApplied uint64
	// DeltasApplied counts deltas applied.
	DeltasApplied uint64
	// CacheWrites counts cache writes.
	CacheWrites uint64
	// CacheErrors counts cache read or write problems.
	CacheErrors uint64
	// StaleTime is the time spent stale (counted when a stale period
	// ends).
	StaleTime time.Duration
}

// Stats returns the client's counters (ErrClosed once closed).
func (c *Client) Stats() (Stats, error) {
	r := C.fs_client_stats(c.h())
	runtime.KeepAlive(c)
	if err := errorOf(C.int(r.status), r.err); err != nil {
		return Stats{}, err
	}
	s := r.stats
	return Stats{
		DefaultNotFound:    uint64(s.default_not_found),
		DefaultNotReady:    uint64(s.default_not_ready),
		DefaultWrongType:   uint64(s.default_wrong_type),
		DefaultMalformed:   uint64(s.default_malformed),
		Connects:           uint64(s.connects),
		Reconnects:         uint64(s.reconnects),
		EndpointSwitches:   uint64(s.endpoint_switches),
		Stalls:             uint64(s.stalls),
		Resyncs:            uint64(s.resyncs),
		ChecksumMismatches: uint64(s.checksum_mismatches),
		DivergedHeads:      uint64(s.diverged_heads),
		RetryHints:         uint64(s.retry_hints),
		SnapshotsApplied:   uint64(s.snapshots_applied),
		DeltasApplied:      uint64(s.deltas_applied),
		CacheWrites:        uint64(s.cache_writes),
		CacheErrors:        uint64(s.cache_errors),
		StaleTime:          time.Duration(s.stale_ms) * time.Millisecond,
	}, nil
}
