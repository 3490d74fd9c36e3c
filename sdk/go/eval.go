package flagstream

// #include "shim.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"time"
	"unsafe"
)

// Reasons (Detail.Reason): why an evaluation served what it served.
const (
	ReasonOff                = "OFF"
	ReasonTargetMatch        = "TARGET_MATCH"
	ReasonRuleMatch          = "RULE_MATCH"
	ReasonFallthrough        = "FALLTHROUGH"
	ReasonPrerequisiteFailed = "PREREQUISITE_FAILED"
	ReasonError              = "ERROR"
)

// Error kinds (Detail.ErrorKind) of an evaluation that returned the
// default (Reason "ERROR"); "" otherwise.
const (
	ErrorFlagNotFound  = "FLAG_NOT_FOUND"
	ErrorWrongType     = "WRONG_TYPE"
	ErrorMalformedFlag = "MALFORMED_FLAG"
	ErrorNotReady      = "NOT_READY"
)

// Detail is one evaluation's result besides its value
// (docs/EVALUATION.md).
type Detail struct {
	// Variation is the served variation's index, -1 when the default was
	// returned.
	Variation int
	// Reason is one of the Reason* constants.
	Reason string
	// ErrorKind is one of the Error* constants when Reason is "ERROR"
	// (and Err is nil), else "".
	ErrorKind string
	// RuleIndex is the matched rule's index for RULE_MATCH, else -1.
	RuleIndex int
	// RuleID is the matched rule's id ("" when it has none).
	RuleID string
	// PrerequisiteKey is the first prerequisite that failed, for
	// PREREQUISITE_FAILED.
	PrerequisiteKey string
	// ScheduleStep is the current step of the schedule that served
	// (1-based; 0 before its first step), -1 when no schedule served.
	ScheduleStep int
	// FlagVersion is the flag's version (0 when not found).
	FlagVersion uint64
	// Revision is the revision of the data evaluated.
	Revision uint64
	// InRollout says a percentage rollout or a schedule chose the
	// variation.
	InRollout bool
	// Stale says the data was older than the staleness threshold.
	Stale bool
	// Err is set when the evaluation could not run at all (a closed
	// client: ErrClosed; a closed Context or a key that is not UTF-8:
	// ErrInvalidArgument); the default was returned, Reason is "ERROR"
	// and ErrorKind is "".
	Err error
}

var reasonNames = [...]string{ReasonOff, ReasonTargetMatch, ReasonRuleMatch, ReasonFallthrough, ReasonPrerequisiteFailed, ReasonError}
var errorKindNames = [...]string{"", ErrorFlagNotFound, ErrorWrongType, ErrorMalformedFlag, ErrorNotReady}

// detailOf converts a detail the library wrote, releasing its strings.
func detailOf(d *C.flagstream_detail) Detail {
	out := Detail{
		Variation:    int(d.variation),
		Reason:       ReasonError,
		RuleIndex:    int(d.rule_index),
		ScheduleStep: int(d.schedule_step),
		FlagVersion:  uint64(d.flag_version),
		Revision:     uint64(d.revision),
		InRollout:    bool(d.in_rollout),
		Stale:        bool(d.stale),
	}
	if int(d.reason) < len(reasonNames) {
		out.Reason = reasonNames[d.reason]
	}
	if int(d.error_kind) < len(errorKindNames) {
		out.ErrorKind = errorKindNames[d.error_kind]
	}
	if d.rule_id.ptr != nil || d.prerequisite_key.ptr != nil {
		if d.rule_id.ptr != nil {
			out.RuleID = C.GoStringN((*C.char)(unsafe.Pointer(d.rule_id.ptr)), C.int(d.rule_id.len))
		}
		if d.prerequisite_key.ptr != nil {
			out.PrerequisiteKey = C.GoStringN((*C.char)(unsafe.Pointer(d.prerequisite_key.ptr)), C.int(d.prerequisite_key.len))
		}
		C.fs_detail_release(d.rule_id, d.prerequisite_key)
	}
	return out
}

// finishDetail is an evaluation's detail, or the detail of one that
// failed (ok false: the caller returns its default).
func finishDetail(status C.int, d *C.flagstream_detail, e C.fs_err) (Detail, bool) {
	out := detailOf(d)
	if err := errorOf(status, e); err != nil {
		return failedDetail(err), false
	}
	return out, true
}

func failedDetail(err error) Detail {
	return Detail{Variation: -1, Reason: ReasonError, RuleIndex: -1, ScheduleStep: -1, Err: err}
}

// Bool evaluates a bool flag for x: its value, or def when the flag is
// missing, has another type, is malformed, the client has no data yet or
// is closed (counted in Stats, never an error). No allocation.
func (c *Client) Bool(key string, x *Context, def bool) bool {
	r := C.fs_bool(c.h(), bytesOf(key), sizeOf(key), x.handle(), C.bool(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return bool(r.value)
}

// BoolDetail is Bool with the evaluation's Detail.
func (c *Client) BoolDetail(key string, x *Context, def bool) (bool, Detail) {
	return c.boolDetail(key, 0, x, def)
}

func (c *Client) boolDetail(key string, f C.uintptr_t, x *Context, def bool) (bool, Detail) {
	r := C.fs_bool_d(c.h(), bytesOf(key), sizeOf(key), f, x.handle(), C.bool(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	d, ok := finishDetail(C.int(r.status), &r.detail, r.err)
	if !ok {
		return def, d
	}
	return bool(r.value), d
}

// Int evaluates an integer flag (as Bool).
func (c *Client) Int(key string, x *Context, def int64) int64 {
	r := C.fs_int(c.h(), bytesOf(key), sizeOf(key), x.handle(), C.int64_t(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return int64(r.value)
}

// IntDetail is Int with the evaluation's Detail.
func (c *Client) IntDetail(key string, x *Context, def int64) (int64, Detail) {
	return c.intDetail(key, 0, x, def)
}

func (c *Client) intDetail(key string, f C.uintptr_t, x *Context, def int64) (int64, Detail) {
	r := C.fs_int_d(c.h(), bytesOf(key), sizeOf(key), f, x.handle(), C.int64_t(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	d, ok := finishDetail(C.int(r.status), &r.detail, r.err)
	if !ok {
		return def, d
	}
	return int64(r.value), d
}

// Float evaluates a number flag (as Bool); an integer flag reads as a
// number too.
func (c *Client) Float(key string, x *Context, def float64) float64 {
	r := C.fs_float(c.h(), bytesOf(key), sizeOf(key), x.handle(), C.double(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	if r.status != C.FLAGSTREAM_STATUS_OK {
		return def
	}
	return float64(r.value)
}

// FloatDetail is Float with the evaluation's Detail.
func (c *Client) FloatDetail(key string, x *Context, def float64) (float64, Detail) {
	return c.floatDetail(key, 0, x, def)
}

func (c *Client) floatDetail(key string, f C.uintptr_t, x *Context, def float64) (float64, Detail) {
	r := C.fs_float_d(c.h(), bytesOf(key), sizeOf(key), f, x.handle(), C.double(def))
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	d, ok := finishDetail(C.int(r.status), &r.detail, r.err)
	if !ok {
		return def, d
	}
	return float64(r.value), d
}

// text kinds of fs_text.
const (
	textString = 0
	textJSON   = 1
)

// text evaluates a string (kind textString) or JSON flag; the value is
// returned as a string.
func (c *Client) text(kind C.int, key string, f C.uintptr_t, x *Context, def string, withDetail bool) (string, Detail, bool) {
	buf := textBufs.Get().(*[textBufSize]byte)
	want := C.int(0)
	if withDetail {
		want = 1
	}
	r := C.fs_text(kind, c.h(), bytesOf(key), sizeOf(key), f, x.handle(), bytesOf(def), sizeOf(def),
		(*C.uint8_t)(&buf[0]), textBufSize, want)
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	var d Detail
	ok := true
	if withDetail {
		d, ok = finishDetail(C.int(r.status), &r.detail, r.err)
	} else {
		ok = r.status == C.FLAGSTREAM_STATUS_OK
	}
	if !ok {
		textBufs.Put(buf)
		return def, d, false
	}
	s := takeTextString(&r, buf)
	textBufs.Put(buf)
	return s, d, true
}

// String evaluates a string flag (as Bool). The value is copied into a
// new Go string (its one allocation).
func (c *Client) String(key string, x *Context, def string) string {
	s, _, _ := c.text(textString, key, 0, x, def, false)
	return s
}

// StringDetail is String with the evaluation's Detail.
func (c *Client) StringDetail(key string, x *Context, def string) (string, Detail) {
	s, d, _ := c.text(textString, key, 0, x, def, true)
	return s, d
}

// jsonDefault is def as JSON text ("null" when empty).
func jsonDefault(def json.RawMessage) string {
	if len(def) == 0 {
		return "null"
	}
	return string(def)
}

// JSON evaluates a JSON flag (as Bool): its value as JSON text (any JSON
// value), or def (nil reads as null; JSON text that does not parse makes
// the evaluation fail and return def as it is).
func (c *Client) JSON(key string, x *Context, def json.RawMessage) json.RawMessage {
	s, _, ok := c.text(textJSON, key, 0, x, jsonDefault(def), false)
	if !ok {
		return def
	}
	return json.RawMessage(s)
}

// JSONDetail is JSON with the evaluation's Detail.
func (c *Client) JSONDetail(key string, x *Context, def json.RawMessage) (json.RawMessage, Detail) {
	return c.jsonDetail(key, 0, x, def)
}

func (c *Client) jsonDetail(key string, f C.uintptr_t, x *Context, def json.RawMessage) (json.RawMessage, Detail) {
	s, d, ok := c.text(textJSON, key, f, x, jsonDefault(def), true)
	if !ok {
		return def, d
	}
	return json.RawMessage(s), d
}

// Type is a flag value type, for DetailAt.
type Type int

// The value types (FLAGSTREAM_TYPE_*).
const (
	TypeBool   Type = 0
	TypeInt    Type = 1
	TypeFloat  Type = 2
	TypeString Type = 3
	TypeJSON   Type = 4
)

// String is the type's name as the flag files write it.
func (t Type) String() string {
	switch t {
	case TypeBool:
		return "bool"
	case TypeInt:
		return "int"
	case TypeFloat:
		return "float"
	case TypeString:
		return "string"
	case TypeJSON:
		return "json"
	}
	return "type?"
}

// DetailAt evaluates flag key of type typ for x as if the time were at
// (schedules and date clauses read it): for tests and schedule previews;
// not counted in Stats. def is encoded with encoding/json; the value
// returned is a bool, int64, float64, string or json.RawMessage (by typ),
// or def when the call failed (the error is also in Detail.Err).
func (c *Client) DetailAt(typ Type, key string, x *Context, def any, at time.Time) (any, Detail, error) {
	js, err := json.Marshal(def)
	if err != nil {
		err = invalidf("default: %v", err)
		return def, failedDetail(err), err
	}
	buf := textBufs.Get().(*[textBufSize]byte)
	defer textBufs.Put(buf)
	r := C.fs_eval_at(c.h(), bytesOf(key), sizeOf(key), x.handle(), C.uint32_t(typ), bytesOfSlice(js), C.size_t(len(js)),
		C.int64_t(at.UnixMilli()), (*C.uint8_t)(&buf[0]), textBufSize)
	runtime.KeepAlive(c)
	runtime.KeepAlive(x)
	d, ok := finishDetail(C.int(r.status), &r.detail, r.err)
	if !ok {
		return def, d, d.Err
	}
	raw := takeText(&r, buf)
	var v any
	switch typ {
	case TypeBool:
		var b bool
		err = json.Unmarshal(raw, &b)
		v = b
	case TypeInt:
		var i int64
		err = json.Unmarshal(raw, &i)
		v = i
	case TypeFloat:
		var f float64
		err = json.Unmarshal(raw, &f)
		v = f
	case TypeString:
		var s string
		err = json.Unmarshal(raw, &s)
		v = s
	default:
		v = json.RawMessage(raw)
	}
	if err != nil {
		err = &Error{Status: StatusInternal, Message: "the library's value " + string(raw) + " as " + typ.String() + ": " + err.Error()}
		return def, failedDetail(err), err
	}
	return v, d, nil
}
