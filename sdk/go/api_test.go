package flagstream_test

// The API on test data and files (no relay): every value type and its
// detail, flag handles, contexts and their setters, errors counted and not
// raised, a use after close answered with ErrClosed, bad options named.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

// testFlags is a flag set of every type, a two-clause rule, a target, a
// prerequisite and a schedule.
const testFlags = `
flags:
  - key: on-off
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    fallthrough: {variation: 0}
  - key: pro-us
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: pro-in-us
        clauses:
          - {attribute: country, op: in, values: [US]}
          - {attribute: plan, op: in, values: [pro]}
        serve: {variation: 0}
    fallthrough: {variation: 1}
  - key: seats
    type: int
    variations: [10, 100]
    on: true
    off_variation: 0
    rules:
      - clauses: [{attribute: seats, op: gte, values: [50]}]
        serve: {variation: 1}
    fallthrough: {variation: 0}
  - key: ratio
    type: float
    variations: [0.25, 0.5]
    on: false
    off_variation: 1
    fallthrough: {variation: 0}
  - key: theme
    type: string
    variations: [light, dark]
    on: true
    off_variation: 0
    targets: [{variation: 1, values: [u-dark]}]
    fallthrough: {variation: 0}
  - key: config
    type: json
    variations: [{"a": 1, "b": [true, 2.5, "x"]}, null]
    on: true
    off_variation: 1
    rules:
      - id: beta
        clauses: [{attribute: beta, op: in, values: [true]}]
        serve: {variation: 0}
    fallthrough: {variation: 1}
  - key: gated
    type: string
    variations: [open, closed]
    on: true
    off_variation: 1
    prerequisites:
      - {key: on-off, variation: 1}
    fallthrough: {variation: 0}
  - key: ramp
    type: string
    variations: [new, old]
    on: true
    off_variation: 1
    fallthrough:
      schedule:
        variation: 0
        otherwise: 1
        steps:
          - {start: "2026-03-01T00:00:00Z", weight: 0}
          - {start: "2026-03-08T00:00:00Z", weight: 100000}
`

func testClient(t *testing.T) *flagstream.Client {
	t.Helper()
	c, err := flagstream.NewTestDataClient(testFlags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func newContext(t *testing.T, key string, attrs map[string]string) *flagstream.Context {
	t.Helper()
	x, err := flagstream.NewContext(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range attrs {
		if err := x.SetString(name, v); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(x.Close)
	return x
}

func TestABIVersionMatches(t *testing.T) {
	// NewClient checks it; a client made means it matched.
	testClient(t)
	if flagstream.ABIVersion != 1 || flagstream.LibraryABIVersion() != flagstream.ABIVersion {
		t.Fatalf("ABIVersion %d, the library's %d", flagstream.ABIVersion, flagstream.LibraryABIVersion())
	}
}

func TestEveryTypeWithItsDetail(t *testing.T) {
	c := testClient(t)
	if err := c.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	u := newContext(t, "u1", map[string]string{"country": "US", "plan": "pro"})

	v, d := c.BoolDetail("pro-us", u, false)
	if !v || d.Reason != flagstream.ReasonRuleMatch || d.RuleIndex != 0 || d.RuleID != "pro-in-us" || d.Variation != 0 ||
		d.ErrorKind != "" || d.Err != nil || d.ScheduleStep != -1 || d.PrerequisiteKey != "" {
		t.Fatalf("pro-us: %v %+v", v, d)
	}
	if err := u.SetNumber("seats", 60); err != nil {
		t.Fatal(err)
	}
	if n, d := c.IntDetail("seats", u, 1); n != 100 || d.Reason != flagstream.ReasonRuleMatch || d.RuleID != "" {
		t.Fatalf("seats: %v %+v", n, d)
	}
	if f, d := c.FloatDetail("ratio", u, 0); f != 0.5 || d.Reason != flagstream.ReasonOff || d.Variation != 1 || d.RuleIndex != -1 {
		t.Fatalf("ratio: %v %+v", f, d)
	}
	if f := c.Float("seats", u, 0); f != 100 {
		t.Fatalf("an int flag read as a number: %v", f)
	}
	dark := newContext(t, "u-dark", nil)
	if s, d := c.StringDetail("theme", dark, "none"); s != "dark" || d.Reason != flagstream.ReasonTargetMatch {
		t.Fatalf("theme: %q %+v", s, d)
	}
	if s := c.String("theme", u, "none"); s != "light" {
		t.Fatalf("theme: %q", s)
	}
	if err := u.SetBool("beta", true); err != nil {
		t.Fatal(err)
	}
	j, d := c.JSONDetail("config", u, json.RawMessage(`{}`))
	var got any
	if err := json.Unmarshal(j, &got); err != nil || d.RuleID != "beta" {
		t.Fatalf("config: %s %+v %v", j, d, err)
	}
	if string(j) != `{"a":1,"b":[true,2.5,"x"]}` {
		t.Fatalf("config: %s", j)
	}
	if j := c.JSON("config", dark, nil); string(j) != "null" {
		t.Fatalf("a null variation: %s", j)
	}
	if s, d := c.StringDetail("gated", u, "x"); s != "closed" || d.Reason != flagstream.ReasonPrerequisiteFailed || d.PrerequisiteKey != "on-off" {
		t.Fatalf("gated: %q %+v", s, d)
	}
	if s := c.String("gated", u, "x"); s != "closed" {
		t.Fatalf("gated: %q", s)
	}
	// A long value takes the second path (longer than the pooled buffer).
	long := strings.Repeat("y", 2000)
	if s := c.String("missing", u, long); s != long {
		t.Fatalf("a long default came back as %d bytes", len(s))
	}
}

func TestDetailAtReadsTheGivenTime(t *testing.T) {
	c := testClient(t)
	u := newContext(t, "u1", nil)
	before := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
	v, d, err := c.DetailAt(flagstream.TypeString, "ramp", u, "dflt", before)
	if err != nil || v != "old" || d.ScheduleStep != 1 || d.Reason != flagstream.ReasonFallthrough {
		t.Fatalf("before: %v %+v %v", v, d, err)
	}
	after := time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)
	v, d, err = c.DetailAt(flagstream.TypeString, "ramp", u, "dflt", after)
	if err != nil || v != "new" || d.ScheduleStep != 2 || !d.InRollout {
		t.Fatalf("after: %v %+v %v", v, d, err)
	}
	v, _, err = c.DetailAt(flagstream.TypeBool, "on-off", u, false, after)
	if err != nil || v != true {
		t.Fatalf("bool: %v %v", v, err)
	}
	v, _, err = c.DetailAt(flagstream.TypeInt, "seats", u, int64(3), after)
	if err != nil || v != int64(10) {
		t.Fatalf("int: %#v %v", v, err)
	}
	v, _, err = c.DetailAt(flagstream.TypeFloat, "ratio", u, 1.5, after)
	if err != nil || v != 0.5 {
		t.Fatalf("float: %#v %v", v, err)
	}
	v, d, err = c.DetailAt(flagstream.TypeJSON, "nope", u, json.RawMessage(`[1]`), after)
	if err != nil || string(v.(json.RawMessage)) != "[1]" || d.ErrorKind != flagstream.ErrorFlagNotFound {
		t.Fatalf("json default: %s %+v %v", v, d, err)
	}
	stats, err := c.Stats()
	if err != nil || stats.DefaultNotFound != 0 {
		t.Fatalf("DetailAt is not counted: %+v %v", stats, err)
	}
}

func TestErrorsAreCountedNotRaised(t *testing.T) {
	c := testClient(t)
	u := newContext(t, "u", nil)
	if !c.Bool("missing", u, true) {
		t.Fatal("a missing flag returns the default")
	}
	s, d := c.StringDetail("missing", u, "dflt")
	if s != "dflt" || d.Reason != flagstream.ReasonError || d.ErrorKind != flagstream.ErrorFlagNotFound || d.Variation != -1 || d.Err != nil {
		t.Fatalf("%q %+v", s, d)
	}
	if n := c.Int("theme", u, 7); n != 7 {
		t.Fatalf("a wrong type returns the default: %d", n)
	}
	_, d = c.IntDetail("theme", u, 7)
	if d.ErrorKind != flagstream.ErrorWrongType {
		t.Fatalf("%+v", d)
	}
	stats, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.DefaultNotFound != 2 || stats.DefaultWrongType != 2 {
		t.Fatalf("%+v", stats)
	}
}

func TestFlagHandlesEvaluateEveryType(t *testing.T) {
	c := testClient(t)
	u := newContext(t, "u1", map[string]string{"country": "US", "plan": "pro"})
	if f := c.Flag("pro-us"); !f.Bool(u, false) || f.Key() != "pro-us" {
		t.Fatal("bool handle")
	}
	if v, d := c.Flag("pro-us").BoolDetail(u, false); !v || d.RuleID != "pro-in-us" {
		t.Fatalf("bool handle detail: %+v", d)
	}
	if n, d := c.Flag("seats").IntDetail(u, 1); n != 10 || d.Reason != flagstream.ReasonFallthrough || c.Flag("seats").Int(u, 1) != 10 {
		t.Fatalf("int handle: %d %+v", n, d)
	}
	if f, d := c.Flag("ratio").FloatDetail(u, 0); f != 0.5 || d.Reason != flagstream.ReasonOff || c.Flag("ratio").Float(u, 0) != 0.5 {
		t.Fatalf("float handle: %v %+v", f, d)
	}
	if s, d := c.Flag("gated").StringDetail(u, ""); s != "closed" || d.PrerequisiteKey != "on-off" || c.Flag("gated").String(u, "") != "closed" {
		t.Fatalf("string handle: %q %+v", s, d)
	}
	if j := c.Flag("config").JSON(u, nil); string(j) != "null" {
		t.Fatalf("json handle: %s", j)
	}
	missing := c.Flag("not-yet")
	if v, d := missing.BoolDetail(u, true); !v || d.ErrorKind != flagstream.ErrorFlagNotFound {
		t.Fatalf("a handle on a missing flag: %+v", d)
	}
	bad := c.Flag("\xff")
	if v, d := bad.BoolDetail(u, true); !v || !errors.Is(d.Err, flagstream.ErrInvalidArgument) || bad.Bool(u, true) != true {
		t.Fatalf("a handle on a key that is not UTF-8: %+v", d)
	}
}

func TestContexts(t *testing.T) {
	c := testClient(t)
	x, err := flagstream.ContextFromJSON([]byte(`{"key": "u1", "kind": "user", "attributes": {"country": "US", "plan": "pro"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if !c.Bool("pro-us", x, false) {
		t.Fatal("a context from JSON")
	}
	multi, err := flagstream.ContextFromJSON([]byte(`{"kind": "multi", "contexts": [{"key": "u1"}, {"key": "o1", "kind": "org"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer multi.Close()
	if err := multi.SetString("plan", "pro"); !errors.Is(err, flagstream.ErrInvalidArgument) {
		t.Fatalf("a setter on a multi-kind context: %v", err)
	}
	if _, err := flagstream.ContextFromJSON([]byte(`{"kind": "multi"}`)); !errors.Is(err, flagstream.ErrInvalidArgument) {
		t.Fatalf("multi without contexts: %v", err)
	}
	if _, err := flagstream.NewContext("\xff"); !errors.Is(err, flagstream.ErrInvalidArgument) {
		t.Fatalf("a key that is not UTF-8: %v", err)
	}
	y := newContext(t, "u2", map[string]string{"country": "US", "plan": "pro"})
	if err := y.Set("plan", []string{"free", "pro"}); err != nil {
		t.Fatal(err)
	}
	if !c.Bool("pro-us", y, false) {
		t.Fatal("a list attribute matches when one element does")
	}
	if err := y.Set("plan", nil); err != nil {
		t.Fatal(err)
	}
	if c.Bool("pro-us", y, false) {
		t.Fatal("Set(nil) removes the attribute")
	}
	if err := y.Set("plan", func() {}); !errors.Is(err, flagstream.ErrInvalidArgument) || !strings.Contains(err.Error(), "plan") {
		t.Fatalf("a value JSON cannot encode: %v", err)
	}
	y.Close()
	y.Close() // harmless
	v, d := c.BoolDetail("on-off", y, false)
	if v || !errors.Is(d.Err, flagstream.ErrInvalidArgument) || !strings.Contains(d.Err.Error(), "context") {
		t.Fatalf("a closed context: %v %+v", v, d)
	}
	if err := y.SetString("a", "b"); !errors.Is(err, flagstream.ErrInvalidArgument) {
		t.Fatalf("setting on a closed context: %v", err)
	}
	if c.Bool("on-off", nil, false) {
		t.Fatal("a nil context returns the default")
	}
}

func TestTestDataClientUseAfterClose(t *testing.T) {
	c, err := flagstream.NewTestDataClient(testFlags)
	if err != nil {
		t.Fatal(err)
	}
	u := newContext(t, "u1", nil)
	handle := c.Flag("on-off")
	changes, stop := c.Changes(1)
	defer stop()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertClosed(t, c, u, handle)
	if _, ok := <-changes; ok {
		t.Fatal("Close closes the Changes channel")
	}
}

// assertClosed checks every call on a closed client: ErrClosed or the
// default, never a crash.
func assertClosed(t *testing.T, c *flagstream.Client, u *flagstream.Context, handle *flagstream.Flag) {
	t.Helper()
	if err := c.Close(context.Background()); !errors.Is(err, flagstream.ErrClosed) {
		t.Fatalf("a second Close: %v", err)
	}
	if !c.Closed() {
		t.Fatal("Closed()")
	}
	if c.Bool("on-off", u, false) {
		t.Fatal("a closed client returns the default")
	}
	if _, d := c.BoolDetail("on-off", u, false); !errors.Is(d.Err, flagstream.ErrClosed) || d.Reason != flagstream.ReasonError {
		t.Fatalf("BoolDetail after close: %+v", d)
	}
	if s, d := c.StringDetail("theme", u, "dflt"); s != "dflt" || !errors.Is(d.Err, flagstream.ErrClosed) {
		t.Fatalf("StringDetail after close: %q %+v", s, d)
	}
	if handle.Bool(u, false) {
		t.Fatal("a handle on a closed client returns the default")
	}
	if _, d := handle.BoolDetail(u, false); !errors.Is(d.Err, flagstream.ErrClosed) {
		t.Fatalf("a handle's detail after close: %+v", d)
	}
	if st, _, err := c.Status(); !errors.Is(err, flagstream.ErrClosed) || st != flagstream.StateClosed {
		t.Fatalf("Status after close: %v %v", st, err)
	}
	if _, err := c.Stats(); !errors.Is(err, flagstream.ErrClosed) {
		t.Fatalf("Stats after close: %v", err)
	}
	if err := c.WaitReady(context.Background()); !errors.Is(err, flagstream.ErrClosed) {
		t.Fatalf("WaitReady after close: %v", err)
	}
	if _, _, err := c.DetailAt(flagstream.TypeBool, "on-off", u, false, time.Now()); !errors.Is(err, flagstream.ErrClosed) {
		t.Fatalf("DetailAt after close: %v", err)
	}
	if _, err := c.OnChange(func(flagstream.Change) {}); !errors.Is(err, flagstream.ErrClosed) {
		t.Fatalf("OnChange after close: %v", err)
	}
	ch, stop := c.Changes(1)
	if _, ok := <-ch; ok {
		t.Fatal("Changes after close: an open channel")
	}
	stop()
}

func TestBadOptionsNameTheField(t *testing.T) {
	cases := []struct {
		o    flagstream.Options
		want string
	}{
		{flagstream.Options{Endpoints: []string{"http://127.0.0.1:1"}}, "options.sdk_key"},
		{flagstream.Options{SDKKey: "k"}, "options.endpoints"},
		{flagstream.Options{Endpoints: []string{"ftp://x"}, SDKKey: "k"}, "ftp://x"},
		{flagstream.Options{Endpoints: []string{"http://127.0.0.1:1"}, SDKKey: "k", ConnectTimeout: -time.Second}, "connect_timeout"},
		{flagstream.Options{Endpoints: []string{"http://127.0.0.1:1"}, SDKKey: "k", WatchdogMisses: -1}, "watchdog_misses"},
		{flagstream.Options{TestData: "flags: {"}, "test_data"},
		{flagstream.Options{OfflineFile: "/nonexistent/flags.yaml"}, "/nonexistent/flags.yaml"},
	}
	for _, tc := range cases {
		c, err := flagstream.NewClient(tc.o)
		if err == nil {
			_ = c.Close(context.Background())
			t.Fatalf("%+v: accepted", tc.o)
		}
		var e *flagstream.Error
		if !errors.As(err, &e) || !errors.Is(err, flagstream.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: %v (want an invalid argument naming %q)", tc.o, err, tc.want)
		}
	}
}

func TestWaitReadyHonoursItsContext(t *testing.T) {
	// Nothing listens on port 1: the client never gets data.
	c, err := flagstream.NewClient(flagstream.Options{Endpoints: []string{"http://127.0.0.1:1"}, SDKKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = c.WaitReady(ctx)
	if !errors.Is(err, flagstream.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		// Not a timing: a cancel before the wait starts ends it the same way.
		time.Sleep(100 * time.Millisecond) // cancels a wait that would never end
		cancel()
	}()
	if err := c.WaitReady(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancel: %v", err)
	}
	u := newContext(t, "u", nil)
	if _, d := c.BoolDetail("x", u, true); d.ErrorKind != flagstream.ErrorNotReady {
		t.Fatalf("no data yet: %+v", d)
	}
	if st, rev, err := c.Status(); err != nil || st != flagstream.StateInitializing || rev != 0 {
		t.Fatalf("%v %v %v", st, rev, err)
	}
}

func TestOfflineFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flags.yaml")
	if err := os.WriteFile(path, []byte(testFlags), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := flagstream.NewOfflineClient(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Bool("on-off", newContext(t, "u", nil), false) {
		t.Fatal("the file's flag")
	}
}

func TestValidateFalseServesMalformedFlags(t *testing.T) {
	const bad = `{"flags": [{"key": "b", "type": "bool", "variations": [true, false], "on": true, "off_variation": 1, "fallthrough": {"variation": 7}}]}`
	if _, err := flagstream.NewTestDataClient(bad); !errors.Is(err, flagstream.ErrInvalidArgument) {
		t.Fatalf("validated by default: %v", err)
	}
	no := false
	c, err := flagstream.NewClient(flagstream.Options{TestData: bad, Validate: &no})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, d := c.BoolDetail("b", newContext(t, "u", nil), true); d.ErrorKind != flagstream.ErrorMalformedFlag {
		t.Fatalf("%+v", d)
	}
}
