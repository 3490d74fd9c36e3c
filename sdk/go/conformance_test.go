package flagstream_test

// The whole data-driven evaluation suite (tests/data/eval/*.yaml, as JSON
// in FLAGSTREAM_EVAL_JSON: tests/tests/bindings/go_sdk.rs converts them)
// through the public Go API: every case, the same value (with its JSON
// type), variation, reason, rule index and id, prerequisite key, schedule
// step and error as the Rust runner, with a context built from JSON and,
// where the context is simple, one built with the setters.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

type evalFile struct {
	name     string
	Validate *bool            `json:"validate"`
	Flags    []any            `json:"flags"`
	Segments []any            `json:"segments"`
	Cases    []map[string]any `json:"cases"`
}

// decode reads JSON with numbers kept as written (json.Number), so 1 and
// 1.0 stay apart.
func decode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

func loadEvalFiles(t *testing.T) []evalFile {
	t.Helper()
	dir := os.Getenv("FLAGSTREAM_EVAL_JSON")
	if dir == "" {
		t.Fatal("FLAGSTREAM_EVAL_JSON must name the directory of tests/data/eval/*.yaml converted to JSON " +
			"(cargo test -p flagstream-tests --test bindings go_sdk makes it)")
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var files []evalFile
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f evalFile
		if err := decode(data, &f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.name = filepath.Base(p)
		files = append(files, f)
	}
	return files
}

func (f *evalFile) client(t *testing.T) *flagstream.Client {
	t.Helper()
	flags, segments := f.Flags, f.Segments
	if flags == nil {
		flags = []any{}
	}
	if segments == nil {
		segments = []any{}
	}
	data, err := json.Marshal(map[string]any{"flags": flags, "segments": segments})
	if err != nil {
		t.Fatal(err)
	}
	validate := true
	if f.Validate != nil {
		validate = *f.Validate
	}
	c, err := flagstream.NewClient(flagstream.Options{TestData: string(data), Validate: &validate})
	if err != nil {
		t.Fatalf("%s: test data refused: %v", f.name, err)
	}
	t.Cleanup(func() { _ = c.Close(nil) })
	return c
}

func TestConformance(t *testing.T) {
	files := loadEvalFiles(t)
	if len(files) == 0 {
		t.Fatal("no conformance files in FLAGSTREAM_EVAL_JSON")
	}
	setterCases := 0
	for i := range files {
		f := &files[i]
		t.Run(strings.TrimSuffix(f.name, ".json"), func(t *testing.T) {
			c := f.client(t)
			var problems []string
			for _, cs := range f.Cases {
				x, err := contextFromJSON(cs["context"])
				if err != nil {
					problems = append(problems, fmt.Sprintf("%v: context refused: %v", cs["name"], err))
					continue
				}
				problems = append(problems, runCase(c, cs, x, "json-context")...)
				x.Close()
				if y := contextWithSetters(t, cs["context"]); y != nil {
					setterCases++
					problems = append(problems, runCase(c, cs, y, "setter-context")...)
					y.Close()
				}
			}
			if len(problems) > 0 {
				t.Fatalf("%d problems in %d cases:\n%s", len(problems), len(f.Cases), strings.Join(problems, "\n"))
			}
		})
	}
	// The setter path must cover a real share of the suite, not nothing.
	if setterCases < 300 {
		t.Fatalf("only %d cases had a context simple enough for the setters", setterCases)
	}
	t.Logf("%d cases also ran with a context built with the setters", setterCases)
}

func TestConformanceSuiteIsWhole(t *testing.T) {
	files := loadEvalFiles(t)
	count := 0
	for _, f := range files {
		count += len(f.Cases)
	}
	if len(files) < 20 || count < 1000 {
		t.Fatalf("the suite is not whole: %d files, %d cases", len(files), count)
	}
	t.Logf("%d files, %d cases", len(files), count)
}

func contextFromJSON(c any) (*flagstream.Context, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return flagstream.ContextFromJSON(data)
}

// contextWithSetters builds the file-form context c with NewContext and
// the Set methods when it is simple: one kind ("user"), attributes that
// are strings, numbers, bools or lists of those. Otherwise nil.
func contextWithSetters(t *testing.T, c any) *flagstream.Context {
	m, ok := c.(map[string]any)
	if !ok || m["contexts"] != nil {
		return nil
	}
	if kind, ok := m["kind"]; ok && kind != "user" {
		return nil
	}
	key := ""
	if k, ok := m["key"]; ok {
		s, isString := k.(string)
		if !isString {
			return nil
		}
		key = s
	}
	attrs, _ := m["attributes"].(map[string]any)
	for _, v := range attrs {
		switch v := v.(type) {
		case string, bool, json.Number:
		case []any:
			for _, e := range v {
				switch e.(type) {
				case string, bool, json.Number:
				default:
					return nil
				}
			}
		default:
			return nil
		}
	}
	x, err := flagstream.NewContext(key)
	if err != nil {
		t.Fatalf("NewContext(%q): %v", key, err)
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch v := attrs[name].(type) {
		case string:
			err = x.SetString(name, v)
		case bool:
			err = x.SetBool(name, v)
		case json.Number:
			if isIntNumber(v) {
				err = x.Set(name, v) // an integer stays one
			} else {
				f, ferr := v.Float64()
				if ferr != nil {
					t.Fatal(ferr)
				}
				err = x.SetNumber(name, f)
			}
		default:
			err = x.Set(name, v)
		}
		if err != nil {
			t.Fatalf("setting %q = %v: %v", name, attrs[name], err)
		}
	}
	return x
}

func isIntNumber(n json.Number) bool {
	return !strings.ContainsAny(string(n), ".eE")
}

// same is equality with the same JSON types: true is not 1, 1 is not 1.0.
func same(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok || isIntNumber(a) != isIntNumber(b) {
			return false
		}
		if isIntNumber(a) {
			x, errA := strconv.ParseInt(string(a), 10, 64)
			y, errB := strconv.ParseInt(string(b), 10, 64)
			if errA != nil || errB != nil {
				return string(a) == string(b)
			}
			return x == y
		}
		x, errA := a.Float64()
		y, errB := b.Float64()
		return errA == nil && errB == nil && x == y
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !same(a[i], b[i]) {
				return false
			}
		}
		return true
	case nil:
		return b == nil
	default:
		return reflect.TypeOf(a) == reflect.TypeOf(b) && a == b
	}
}

// jsonValue is a Go value as its JSON-typed form (numbers as json.Number:
// int64 as an integer, float64 always as a float).
func jsonValue(typ string, v any) any {
	switch v := v.(type) {
	case int64:
		return json.Number(strconv.FormatInt(v, 10))
	case float64:
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if isIntNumber(json.Number(s)) {
			s += ".0"
		}
		return json.Number(s)
	case json.RawMessage:
		var out any
		if err := decode(v, &out); err != nil {
			return fmt.Sprintf("unparseable JSON %q", string(v))
		}
		return out
	}
	return v
}

// evaluate runs one case through the typed *Detail call (or DetailAt with
// `now`), and the plain call without `now`: the value(s) as JSON-typed
// values and the detail.
func evaluate(c *flagstream.Client, cs map[string]any, x *flagstream.Context) (value any, plain any, d flagstream.Detail, err error) {
	typ, _ := cs["type"].(string)
	key, _ := cs["flag"].(string)
	def := cs["default"]
	if now, ok := cs["now"]; ok && now != nil {
		var at time.Time
		switch now := now.(type) {
		case string:
			at, err = time.Parse(time.RFC3339Nano, now)
		case json.Number:
			var ms int64
			ms, err = now.Int64()
			at = time.UnixMilli(ms)
		default:
			err = fmt.Errorf("now: %v", now)
		}
		if err != nil {
			return nil, nil, d, err
		}
		types := map[string]flagstream.Type{"bool": flagstream.TypeBool, "int": flagstream.TypeInt,
			"float": flagstream.TypeFloat, "string": flagstream.TypeString, "json": flagstream.TypeJSON}
		t, ok := types[typ]
		if !ok {
			return nil, nil, d, fmt.Errorf("type %q", typ)
		}
		var v any
		v, d, err = c.DetailAt(t, key, x, def, at)
		return jsonValue(typ, v), nil, d, err
	}
	switch typ {
	case "bool":
		dv, _ := def.(bool)
		v, dd := c.BoolDetail(key, x, dv)
		return v, c.Bool(key, x, dv), dd, dd.Err
	case "int":
		n, _ := def.(json.Number)
		dv, err := n.Int64()
		if err != nil {
			return nil, nil, d, fmt.Errorf("default %v: %v", def, err)
		}
		v, dd := c.IntDetail(key, x, dv)
		return jsonValue(typ, v), jsonValue(typ, c.Int(key, x, dv)), dd, dd.Err
	case "float":
		n, _ := def.(json.Number)
		dv, err := n.Float64()
		if err != nil {
			return nil, nil, d, fmt.Errorf("default %v: %v", def, err)
		}
		v, dd := c.FloatDetail(key, x, dv)
		return jsonValue(typ, v), jsonValue(typ, c.Float(key, x, dv)), dd, dd.Err
	case "string":
		dv, _ := def.(string)
		v, dd := c.StringDetail(key, x, dv)
		return v, c.String(key, x, dv), dd, dd.Err
	case "json":
		dv, err := json.Marshal(def)
		if err != nil {
			return nil, nil, d, err
		}
		v, dd := c.JSONDetail(key, x, dv)
		return jsonValue(typ, v), jsonValue(typ, c.JSON(key, x, dv)), dd, dd.Err
	}
	return nil, nil, d, fmt.Errorf("type %q", typ)
}

func runCase(c *flagstream.Client, cs map[string]any, x *flagstream.Context, how string) []string {
	name := fmt.Sprintf("%v (%s)", cs["name"], how)
	value, plain, d, err := evaluate(c, cs, x)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	got := map[string]any{"value": value, "reason": d.Reason}
	if d.Variation >= 0 {
		got["variation"] = json.Number(strconv.Itoa(d.Variation))
	}
	if d.RuleIndex >= 0 {
		got["rule_index"] = json.Number(strconv.Itoa(d.RuleIndex))
	}
	if d.RuleID != "" {
		got["rule_id"] = d.RuleID
	}
	if d.PrerequisiteKey != "" {
		got["prerequisite_key"] = d.PrerequisiteKey
	}
	if d.ScheduleStep >= 0 {
		got["schedule_step"] = json.Number(strconv.Itoa(d.ScheduleStep))
	}
	if d.ErrorKind != "" {
		got["error"] = d.ErrorKind
	}
	want := map[string]any{}
	expect, _ := cs["expect"].(map[string]any)
	for k, v := range expect {
		want[k] = v
	}
	if want["rule_id"] == "" {
		delete(want, "rule_id")
	}
	if n, ok := want["value"].(json.Number); ok && cs["type"] == "float" && isIntNumber(n) {
		want["value"] = json.Number(string(n) + ".0")
	}
	var problems []string
	if !same(got, want) {
		problems = append(problems, fmt.Sprintf("%s: expected %s\n    got %s", name, show(want), show(got)))
	}
	if plain != nil && !same(plain, value) {
		problems = append(problems, fmt.Sprintf("%s: the plain call returned %s, the detail call %s", name, show(plain), show(value)))
	}
	return problems
}

func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}
