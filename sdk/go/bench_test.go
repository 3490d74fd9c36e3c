package flagstream_test

// The cost of one evaluation through the Go package, each next to a floor
// measured in the same run (a Go map lookup returning a precomputed
// value): an on/off flag, a two-clause rule with a reused context, a
// context built per call, a random flag of 10,000. And the behaviour the
// hot path promises: no Go allocation with a reused context.
//
//	go test -run '^$' -bench . -benchmem

import (
	"encoding/json"
	"fmt"
	"testing"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

// sink keeps results alive so nothing is optimised away.
var sink bool

func benchClient(b testing.TB, flags string) *flagstream.Client {
	c, err := flagstream.NewTestDataClient(flags)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(nil) })
	return c
}

func benchContext(b testing.TB) *flagstream.Context {
	x, err := flagstream.NewContext("user-42")
	if err != nil {
		b.Fatal(err)
	}
	if err := x.SetString("country", "US"); err != nil {
		b.Fatal(err)
	}
	if err := x.SetString("plan", "pro"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(x.Close)
	return x
}

// floor is a Go map lookup of a precomputed value.
func floor(b *testing.B, keys []string) {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sink = m[keys[i%len(keys)]]
	}
}

// BenchmarkCgoCallFloor is the cost of crossing into the library and back
// (a call that does nothing but return a constant): the part of every
// evaluation below that is cgo's, not the evaluation's.
func BenchmarkCgoCallFloor(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink = flagstream.LibraryABIVersion() == flagstream.ABIVersion
	}
}

func BenchmarkOnOffFlag(b *testing.B) {
	c := benchClient(b, testFlags)
	x := benchContext(b)
	if !c.Bool("on-off", x, false) {
		b.Fatal("on-off is on")
	}
	b.Run("floor-map", func(b *testing.B) { floor(b, []string{"on-off"}) })
	b.Run("flagstream", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = c.Bool("on-off", x, false)
		}
	})
	b.Run("flag-handle", func(b *testing.B) {
		f := c.Flag("on-off")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink = f.Bool(x, false)
		}
	})
}

func BenchmarkTwoClauseRuleReusedContext(b *testing.B) {
	c := benchClient(b, testFlags)
	x := benchContext(b)
	if v, d := c.BoolDetail("pro-us", x, false); !v || d.Reason != flagstream.ReasonRuleMatch {
		b.Fatalf("the rule matches: %+v", d)
	}
	b.Run("floor-map", func(b *testing.B) { floor(b, []string{"pro-us"}) })
	b.Run("flagstream", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = c.Bool("pro-us", x, false)
		}
	})
}

func BenchmarkTwoClauseRuleContextPerCall(b *testing.B) {
	c := benchClient(b, testFlags)
	b.Run("floor-map", func(b *testing.B) { floor(b, []string{"pro-us"}) })
	b.Run("flagstream", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			x, err := flagstream.NewContext("user-42")
			if err != nil {
				b.Fatal(err)
			}
			_ = x.SetString("country", "US")
			_ = x.SetString("plan", "pro")
			sink = c.Bool("pro-us", x, false)
			x.Close()
		}
	})
}

// manyFlags is test data of n bool flags, each with a one-clause rule.
func manyFlags(n int) (string, []string) {
	type clause struct {
		Attribute string   `json:"attribute"`
		Op        string   `json:"op"`
		Values    []string `json:"values"`
	}
	flags := make([]map[string]any, n)
	keys := make([]string, n)
	for i := range flags {
		keys[i] = fmt.Sprintf("flag-%05d", i)
		flags[i] = map[string]any{
			"key": keys[i], "type": "bool", "variations": []bool{true, false}, "on": true, "off_variation": 1,
			"rules": []any{map[string]any{
				"clauses": []clause{{Attribute: "country", Op: "in", Values: []string{"US", "CA"}}},
				"serve":   map[string]int{"variation": 0},
			}},
			"fallthrough": map[string]int{"variation": 1},
		}
	}
	data, err := json.Marshal(map[string]any{"flags": flags})
	if err != nil {
		panic(err)
	}
	return string(data), keys
}

// randomOrder is a fixed pseudo-random sequence of indices into n keys.
func randomOrder(n int) []int {
	order := make([]int, 1<<16)
	s := uint64(0x9E3779B97F4A7C15)
	for i := range order {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		order[i] = int(s % uint64(n))
	}
	return order
}

func BenchmarkRandomFlagOf10000(b *testing.B) {
	data, keys := manyFlags(10000)
	c := benchClient(b, data)
	x := benchContext(b)
	order := randomOrder(len(keys))
	if !c.Bool(keys[order[0]], x, false) {
		b.Fatal("the rule matches")
	}
	b.Run("floor-map", func(b *testing.B) {
		m := make(map[string]bool, len(keys))
		for _, k := range keys {
			m[k] = true
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink = m[keys[order[i&(len(order)-1)]]]
		}
	})
	b.Run("flagstream", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = c.Bool(keys[order[i&(len(order)-1)]], x, false)
		}
	})
}

// TestZeroAllocationsWithAReusedContext: an evaluation with a reused
// context (by key or through a handle, plain or with a detail without
// strings) allocates nothing in Go.
func TestZeroAllocationsWithAReusedContext(t *testing.T) {
	c := benchClient(t, testFlags)
	x := benchContext(t)
	f := c.Flag("pro-us")
	n := c.Flag("seats")
	cases := map[string]func(){
		"Bool (rule)":         func() { sink = c.Bool("pro-us", x, false) },
		"Bool (missing)":      func() { sink = c.Bool("missing", x, false) },
		"Int":                 func() { sink = c.Int("seats", x, 0) == 10 },
		"Float":               func() { sink = c.Float("ratio", x, 0) == 0.5 },
		"Flag.Bool":           func() { sink = f.Bool(x, false) },
		"Flag.Int":            func() { sink = n.Int(x, 0) == 10 },
		"BoolDetail (no ids)": func() { v, d := c.BoolDetail("on-off", x, false); sink = v && d.Variation == 0 },
	}
	for name, fn := range cases {
		if allocs := testing.AllocsPerRun(1000, fn); allocs != 0 {
			t.Errorf("%s: %v allocations per evaluation", name, allocs)
		}
	}
}
