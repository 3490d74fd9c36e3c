// Package flagstream is the Go client of flagstream: flags evaluated
// locally, in memory, from the data a relay streams over gRPC. It wraps
// the Rust client through its C ABI (sdk/ffi, linked statically: a
// service ships one binary).
//
// A client is made once and shared by every goroutine:
//
//	c, err := flagstream.NewClient(flagstream.Options{
//		Endpoints: []string{"http://127.0.0.1:7070"},
//		SDKKey:    key,
//	})
//	if err != nil { ... }
//	defer c.Close(context.Background())
//	if err := c.WaitReady(ctx); err != nil { ... } // first data, or ctx ended
//
// An evaluation takes a Context (built once per request and reused) and a
// default, and never fails: a missing flag, a flag of another type or no
// data yet return the default, counted in Stats.
//
//	user, _ := flagstream.NewContext("user-42")
//	defer user.Close()
//	user.SetString("plan", "enterprise")
//	if c.Bool("new-checkout", user, false) { ... }
//
// The *Detail methods also return why (Detail: variation, reason, rule,
// error kind). Flag handles (Client.Flag) skip the key lookup on a hot
// path. Change notifications arrive through OnChange (a callback) or
// Changes (a channel).
//
// With a reused Context, Bool, Int, Float and the handles' equivalents
// allocate nothing in Go; String and JSON allocate their result.
//
// Errors of calls that can fail are *Error values: compare them with
// errors.Is against ErrClosed, ErrTimeout, ErrInvalidArgument, ErrPanic
// and ErrInternal.
package flagstream
