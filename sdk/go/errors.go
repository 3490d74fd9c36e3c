package flagstream

import "fmt"

// Status is what a call into the library did (flagstream_status).
type Status int

// The library's statuses.
const (
	// StatusOK: done.
	StatusOK Status = 0
	// StatusInvalidArgument: an argument was wrong (bad options, bad UTF-8,
	// a closed Context); the message names it.
	StatusInvalidArgument Status = 1
	// StatusClosed: the client was closed.
	StatusClosed Status = 2
	// StatusTimeout: a wait ended before what it waited for.
	StatusTimeout Status = 3
	// StatusPanic: the library panicked; the message is the panic's.
	StatusPanic Status = 4
	// StatusInternal: anything else (the message says what).
	StatusInternal Status = 5
)

// String is the status's name.
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "OK"
	case StatusInvalidArgument:
		return "invalid argument"
	case StatusClosed:
		return "closed"
	case StatusTimeout:
		return "timeout"
	case StatusPanic:
		return "panic"
	case StatusInternal:
		return "internal error"
	}
	return fmt.Sprintf("status %d", int(s))
}

// Error is an error the library (or this package) returned: its status
// and message. Compare with the sentinels using errors.Is:
//
//	if errors.Is(err, flagstream.ErrClosed) { ... }
type Error struct {
	// Status is the kind of failure.
	Status Status
	// Message says what failed (for invalid arguments it names the
	// argument or option).
	Message string
	// cause is what ended a wait (a context's error), if anything.
	cause error
}

// Error formats the error as "flagstream: <status>: <message>".
func (e *Error) Error() string {
	if e.Message == "" {
		return "flagstream: " + e.Status.String()
	}
	return "flagstream: " + e.Status.String() + ": " + e.Message
}

// Is reports whether target is the sentinel of e's status (ErrClosed,
// ErrTimeout, ErrInvalidArgument, ErrPanic, ErrInternal), or an *Error
// with the same status and message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Status == e.Status && (t.Message == "" || t.Message == e.Message)
}

// Unwrap returns what ended a wait (context.Canceled or
// context.DeadlineExceeded for WaitReady), or nil.
func (e *Error) Unwrap() error { return e.cause }

// Sentinels for errors.Is; every error this package returns for a failed
// library call is an *Error matching one of them.
var (
	// ErrClosed: the client was closed.
	ErrClosed = &Error{Status: StatusClosed}
	// ErrTimeout: a wait ended first (WaitReady without data).
	ErrTimeout = &Error{Status: StatusTimeout}
	// ErrInvalidArgument: an argument or option was wrong.
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	// ErrPanic: the library panicked (nothing unwound into Go).
	ErrPanic = &Error{Status: StatusPanic}
	// ErrInternal: anything else.
	ErrInternal = &Error{Status: StatusInternal}
)

// errClosed is the error for a call on a client this package knows is
// closed (no library call needed).
func errClosed() error {
	return &Error{Status: StatusClosed, Message: "the client was closed"}
}

func invalidf(format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
