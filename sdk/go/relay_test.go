package flagstream_test

// The Go client against real relay processes: first data and a change
// arriving (listener and channel), failover by delta, the blackhole stall
// with default settings, the cache with every relay down, a use after
// close, a process that exits after Close, and the finalizer of a client
// dropped while a listener's send waits.

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

// syncBuffer is a bytes.Buffer safe for the log package's writes from a
// library thread.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRelayFirstDataAndAChange(t *testing.T) {
	logged := &syncBuffer{}
	log.SetOutput(logged)
	defer log.SetOutput(os.Stderr)

	a := startRelay(t, filepath.Join(t.TempDir(), "a"))
	c := relayClient(t, flagstream.Options{Endpoints: []string{a.url()}, SDKKey: a.sdkKey()})
	waitReady(t, c)
	state, revision, err := c.Status()
	if err != nil || state != flagstream.StateReady || revision == 0 {
		t.Fatalf("status: %v %d %v", state, revision, err)
	}
	u := user42(t)
	if s := c.String("theme", u, "light"); s != "dark" {
		t.Fatalf("theme: %q", s)
	}
	if !c.Bool("new-checkout", u, false) {
		t.Fatal("new-checkout")
	}
	v, d := c.BoolDetail("new-checkout", u, false)
	if !v || d.Reason != flagstream.ReasonRuleMatch || d.RuleID != "us-enterprise" || d.RuleIndex != 0 || d.Variation != 0 {
		t.Fatalf("new-checkout: %+v", d)
	}
	if d.Revision != revision || d.Stale {
		t.Fatalf("the detail's revision %d, the status's %d, stale %v", d.Revision, revision, d.Stale)
	}

	// A listener that panics is logged; the others still run.
	if _, err := c.OnChange(func(flagstream.Change) { panic("a listener's bug") }); err != nil {
		t.Fatal(err)
	}
	// Each listener is called on its own: the recording one says when it
	// has seen go-flag, and the test waits for that, not for another's.
	var mu sync.Mutex
	var seen []flagstream.Change
	recorded := make(chan struct{})
	var recordedOnce sync.Once
	if _, err := c.OnChange(func(ch flagstream.Change) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ch)
		for _, k := range ch.Flags {
			if k == "go-flag" {
				recordedOnce.Do(func() { close(recorded) })
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	changes, stop := c.Changes(16)
	defer stop()
	// A listener removed before the change is never called.
	var removedCalls atomic.Int32
	unsubscribe, err := c.OnChange(func(flagstream.Change) { removedCalls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	unsubscribe()
	unsubscribe() // idempotent
	changed := flagEvent(t, c, "go-flag")
	handle := c.Flag("go-flag")
	if c.Bool("go-flag", u, false) || handle.Bool(u, false) {
		t.Fatal("go-flag before it exists")
	}

	a.flagctl("flag", "create", "go-flag", "--on", "--yes")
	waitFor(t, changed, "the change", c)
	deadline := time.After(step)
	for found := false; !found; {
		select {
		case ch, ok := <-changes:
			if !ok {
				t.Fatal("the channel closed")
			}
			for _, k := range ch.Flags {
				found = found || k == "go-flag"
			}
			if found && ch.Revision <= revision {
				t.Fatalf("the change's revision %d is not newer than %d", ch.Revision, revision)
			}
		case <-deadline:
			t.Fatal("the channel never received the change")
		}
	}
	if !c.Bool("go-flag", u, false) || !handle.Bool(u, false) {
		t.Fatal("go-flag after the change")
	}
	waitFor(t, recorded, "the change at the recording listener", c)
	mu.Lock()
	listened := false
	for _, ch := range seen {
		for _, k := range ch.Flags {
			listened = listened || k == "go-flag"
		}
	}
	mu.Unlock()
	if !listened {
		t.Fatalf("the listener did not see go-flag: %+v", seen)
	}
	if n := removedCalls.Load(); n != 0 {
		t.Fatalf("a removed listener was called %d times", n)
	}
	// The panicking listener is called on its own too: wait for its log.
	for deadline := time.Now().Add(step); !strings.Contains(logged.String(), "a change listener panicked: a listener's bug"); {
		if time.Now().After(deadline) {
			t.Fatalf("the panic was not logged within %s: %q", step, logged.String())
		}
		time.Sleep(10 * time.Millisecond) // a poll of the log, bounded by the deadline above
	}
	s := stats(t, c)
	if s.SnapshotsApplied != 1 || s.DeltasApplied < 1 {
		t.Fatalf("one snapshot, then deltas: %s", describe(s))
	}
	if s.DefaultNotFound < 1 {
		t.Fatalf("the evaluation before the flag existed was counted: %s", describe(s))
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range changes {
		// Close closes the channel (after what was buffered).
	}
	if !strings.Contains(logged.String(), "a change listener panicked: a listener's bug") {
		t.Fatalf("the panic was not logged: %q", logged.String())
	}
	assertClosed(t, c, u, handle)
}

func TestRelayFailoverByDelta(t *testing.T) {
	dir := t.TempDir()
	a := startRelay(t, filepath.Join(dir, "a"))
	a.stop()
	copyDir(t, a.data, filepath.Join(dir, "b", "data")) // the same store: the same epoch
	b := startRelay(t, filepath.Join(dir, "b"))
	a = startRelay(t, filepath.Join(dir, "a"))
	c := relayClient(t, flagstream.Options{Endpoints: []string{a.url(), b.url()}, SDKKey: a.sdkKey(),
		KeepEndpointOrder: true, BackoffBase: 100 * time.Millisecond})
	waitReady(t, c)
	if s := stats(t, c); s.SnapshotsApplied != 1 {
		t.Fatalf("%s", describe(s))
	}
	changed := flagEvent(t, c, "after-failover")
	a.kill()
	b.flagctl("flag", "create", "after-failover", "--on", "--yes")
	waitFor(t, changed, "the change from the other relay", c)
	if !c.Bool("after-failover", user42(t), false) {
		t.Fatal("after-failover")
	}
	s := stats(t, c)
	if s.SnapshotsApplied != 1 {
		t.Fatalf("resumed with a delta, not a snapshot: %s", describe(s))
	}
	if s.EndpointSwitches < 1 || s.DeltasApplied < 1 {
		t.Fatalf("%s", describe(s))
	}
}

func TestRelayBlackholeStallRecoveredWithDefaultSettings(t *testing.T) {
	dir := t.TempDir()
	a := startRelay(t, filepath.Join(dir, "a"))
	a.stop()
	copyDir(t, a.data, filepath.Join(dir, "b", "data"))
	b := startRelay(t, filepath.Join(dir, "b"))
	a = startRelay(t, filepath.Join(dir, "a"))
	p := startProxy(t, a.grpc)
	// Default settings except the order (the stalled path first).
	c := relayClient(t, flagstream.Options{Endpoints: []string{p.url(), b.url()}, SDKKey: a.sdkKey(), KeepEndpointOrder: true})
	waitReady(t, c)
	if s := stats(t, c); s.SnapshotsApplied != 1 {
		t.Fatalf("%s", describe(s))
	}
	changed := flagEvent(t, c, "after-stall")
	p.blackhole()
	b.flagctl("flag", "create", "after-stall", "--on", "--yes")
	// With default settings the stall is found in about 5 s, then the
	// change arrives from the other relay (bounded by step only).
	waitFor(t, changed, "the change after the stall", c)
	u := user42(t)
	if !c.Bool("after-stall", u, false) {
		t.Fatal("after-stall")
	}
	if s := c.String("theme", u, "light"); s != "dark" {
		t.Fatalf("never the default for a known flag: %q", s)
	}
	s := stats(t, c)
	if s.Stalls != 1 {
		t.Fatalf("detected as one stall: %s", describe(s))
	}
	if s.EndpointSwitches != 1 {
		t.Fatalf("%s", describe(s))
	}
	if s.SnapshotsApplied != 1 {
		t.Fatalf("resumed with a delta: %s", describe(s))
	}
}

func TestRelayCacheAcrossARestartWithEveryRelayDown(t *testing.T) {
	dir := t.TempDir()
	a := startRelay(t, filepath.Join(dir, "a"))
	cache := filepath.Join(dir, "cache")
	o := flagstream.Options{Endpoints: []string{a.url()}, SDKKey: a.sdkKey(), CacheDir: cache}
	c := relayClient(t, o)
	waitReady(t, c)
	changed := flagEvent(t, c, "cached-flag")
	a.flagctl("flag", "create", "cached-flag", "--on", "--yes")
	waitFor(t, changed, "the change", c)
	// Close writes the newest revision; then no relay at all.
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.kill()
	c = relayClient(t, o)
	waitReady(t, c)
	if st, _, err := c.Status(); err != nil || st != flagstream.StateStale {
		t.Fatalf("served from the cache, stale: %v %v", st, err)
	}
	u := user42(t)
	if !c.Bool("cached-flag", u, false) {
		t.Fatal("cached-flag")
	}
	if s := c.String("theme", u, "light"); s != "dark" {
		t.Fatalf("theme: %q", s)
	}
	if s := stats(t, c); s.CacheErrors != 0 {
		t.Fatalf("%s", describe(s))
	}
}

func TestRelayUseAfterClose(t *testing.T) {
	a := startRelay(t, filepath.Join(t.TempDir(), "a"))
	c := relayClient(t, flagstream.Options{Endpoints: []string{a.url()}, SDKKey: a.sdkKey()})
	waitReady(t, c)
	u := user42(t)
	handle := c.Flag("new-checkout")
	if !handle.Bool(u, false) {
		t.Fatal("new-checkout")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertClosed(t, c, u, handle)
}

// TestRelayFinalizerNeverWaitsOnAFullChannel: a client dropped without
// Close while the send to its unread Changes channel waits is freed by its
// finalizer, which closes the channel and never holds up the runtime's
// finalizer goroutine (one for the whole process): a finalizer queued
// after the client's still runs.
func TestRelayFinalizerNeverWaitsOnAFullChannel(t *testing.T) {
	a := startRelay(t, filepath.Join(t.TempDir(), "a"))
	changes, arrived, client := abandonedClient(t, a)
	a.flagctl("flag", "create", "gc-flag", "--on", "--yes")
	select {
	case <-arrived:
	case <-time.After(step):
		t.Fatalf("the change did not arrive within %s", step)
	}
	// Reachable until the change arrived (a collection before that would
	// finalize it, and the change would never arrive); unreachable from
	// here on.
	runtime.KeepAlive(client)
	// Gives the send time to block (what the test is about); were it not
	// blocked yet, the finalizer's run below is checked all the same.
	time.Sleep(100 * time.Millisecond)
	runtime.GC() // the client is unreachable: its finalizer is queued

	type sentinel struct {
		buf []byte // a pointer: never in a tiny allocation block
	}
	finalized := make(chan struct{})
	func() {
		s := &sentinel{buf: make([]byte, 64)}
		runtime.SetFinalizer(s, func(*sentinel) { close(finalized) })
	}()
	deadline := time.After(step)
	for done := false; !done; {
		runtime.GC()
		select {
		case <-finalized:
			done = true
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("a finalizer queued after the client's did not run within %s: the finalizer goroutine is blocked", step)
		}
	}
	// The client's finalizer stopped the channel listener: the channel is
	// closed (after what it buffered).
	deadline = time.After(step)
	for {
		select {
		case _, ok := <-changes:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the channel of a finalized client was not closed within %s", step)
		}
	}
}

// abandonedClient makes a client of a with an unread, unbuffered Changes
// channel and a callback that says when a change names gc-flag, and keeps
// no reference to the client (no Close, no unsubscribe function); the
// caller gets it only to keep it reachable until the change arrived.
func abandonedClient(t *testing.T, a *relay) (<-chan flagstream.Change, <-chan struct{}, *flagstream.Client) {
	t.Helper()
	c, err := flagstream.NewClient(flagstream.Options{Endpoints: []string{a.url()}, SDKKey: a.sdkKey()})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, c)
	arrived := make(chan struct{})
	var once sync.Once
	if _, err := c.OnChange(func(ch flagstream.Change) {
		for _, k := range ch.Flags {
			if k == "gc-flag" {
				once.Do(func() { close(arrived) })
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	changes, _ := c.Changes(0)
	return changes, arrived, c
}

// TestCloseLetsTheProcessExit runs internal/closeexit (a program with a
// client, a listener and a channel against the relay) as a process of
// its own: it must exit on its own after Close, and without Close.
func TestCloseLetsTheProcessExit(t *testing.T) {
	a := startRelay(t, filepath.Join(t.TempDir(), "a"))
	exe := filepath.Join(t.TempDir(), "closeexit")
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		if gotool, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go tool to build ./internal/closeexit: %v", err)
		}
	}
	build := exec.Command(gotool, "build", "-o", exe, "./internal/closeexit")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./internal/closeexit: %v\n%s", err, out)
	}
	for _, mode := range []string{"close", "no-close"} {
		ctx, cancel := context.WithTimeout(context.Background(), step)
		cmd := exec.CommandContext(ctx, exe, a.url(), a.sdkKey(), mode)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("%s: the process did not exit within %s (something held it):\n%s", mode, step, out)
		}
		if err != nil || !strings.Contains(string(out), "returning from main") {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
	}
}

// TestRelayListenersComeAndGoWhileChangesArriveAndClose: goroutines add
// listeners (callbacks, and channels read once then left unread so that
// the next send waits), remove them once a change reached them, and add
// new ones, while changes arrive and Close runs: never a crash, a
// deadlock or a call after an unsubscribe returned (run it with -race
// too).
func TestRelayListenersComeAndGoWhileChangesArriveAndClose(t *testing.T) {
	a := startRelay(t, filepath.Join(t.TempDir(), "a"))
	c := relayClient(t, flagstream.Options{Endpoints: []string{a.url()}, SDKKey: a.sdkKey()})
	waitReady(t, c)
	var wg sync.WaitGroup
	done := make(chan struct{})
	var late, calls atomic.Int32
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if g%2 == 0 {
					var removed atomic.Bool
					got := make(chan struct{}, 1)
					unsubscribe, err := c.OnChange(func(flagstream.Change) {
						calls.Add(1)
						if removed.Load() {
							late.Add(1)
						}
						select {
						case got <- struct{}{}:
						default:
						}
					})
					if err != nil {
						return // closed
					}
					select {
					case <-got:
					case <-done:
					}
					unsubscribe()
					removed.Store(true)
				} else {
					changes, stop := c.Changes(0)
					select {
					case _, ok := <-changes:
						if ok {
							calls.Add(1)
						}
					case <-done:
					}
					stop() // the next send may be waiting
				}
			}
		}(g)
	}
	for i := 0; i < 5; i++ {
		a.flagctl("flag", "create", fmt.Sprintf("churn-%d", i), "--on", "--yes")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(done)
	wg.Wait()
	if n := late.Load(); n != 0 {
		t.Fatalf("%d calls after an unsubscribe returned", n)
	}
	if calls.Load() == 0 {
		t.Fatal("no listener was ever called: the test tested nothing")
	}
}
