package flagstream

import (
	"encoding/json"
	"time"
)

// Options configure a Client. Exactly one source of flags is used: relays
// (Endpoints with SDKKey), TestData, or OfflineFile. A zero field means the
// library's default. The library checks them and names a wrong one in the
// error (for example "options: no SDK key").
type Options struct {
	// Endpoints are the relay URLs (http:// or https://), in order of
	// preference.
	Endpoints []string
	// SDKKey is the environment's SDK key.
	SDKKey string
	// CacheDir keeps the last-known-good flags across restarts (one
	// directory per client).
	CacheDir string
	// TLSCAPEM is a PEM bundle of CA certificates to trust for https://
	// endpoints (instead of the system roots).
	TLSCAPEM string
	// TLSIdentity is a client certificate for mutual TLS.
	TLSIdentity *TLSIdentity

	// ConnectTimeout bounds each connection attempt.
	ConnectTimeout time.Duration
	// KeepaliveInterval is the HTTP/2 keepalive ping interval.
	KeepaliveInterval time.Duration
	// KeepaliveTimeout is how long a keepalive ping may go unanswered.
	KeepaliveTimeout time.Duration
	// TCPUserTimeout is the TCP_USER_TIMEOUT of the connections.
	TCPUserTimeout time.Duration
	// FirstMessageTimeout bounds the wait for a stream's first message.
	FirstMessageTimeout time.Duration
	// HeartbeatDefault is the heartbeat interval assumed until the relay
	// states its own.
	HeartbeatDefault time.Duration
	// BackoffBase is the first reconnection delay.
	BackoffBase time.Duration
	// BackoffCap is the largest reconnection delay.
	BackoffCap time.Duration
	// HealthyAfter is how long a stream must last to reset the backoff.
	HealthyAfter time.Duration
	// StallJitter spreads the stall watchdog's deadline.
	StallJitter time.Duration
	// StaleAfter is the age after which data counts as stale.
	StaleAfter time.Duration
	// CacheWriteInterval is the shortest time between cache writes.
	CacheWriteInterval time.Duration
	// UsageInterval is how often usage summaries are sent.
	UsageInterval time.Duration
	// WatchdogMisses is how many heartbeats may be missed before a stream
	// counts as stalled.
	WatchdogMisses int
	// KeepEndpointOrder tries the endpoints in the order given (no
	// shuffling).
	KeepEndpointOrder bool
	// UsageReports sends usage summaries to the relay (nil: the default,
	// on).
	UsageReports *bool

	// TestData serves these flags, no relay: a flag set as YAML or JSON
	// text ({"flags": [...], "segments": [...]}).
	TestData string
	// Validate checks TestData's flags first (nil: the default, true).
	// False serves them as they are: a malformed flag then evaluates to a
	// MALFORMED_FLAG error.
	Validate *bool
	// OfflineFile serves the flags of this file (YAML or JSON), no relay.
	OfflineFile string
}

// TLSIdentity is a client certificate and its private key, PEM encoded.
type TLSIdentity struct {
	// CertPEM is the certificate chain.
	CertPEM string
	// KeyPEM is the private key.
	KeyPEM string
}

// wireOptions is the options JSON of flagstream_client_new.
type wireOptions struct {
	Endpoints           []string  `json:"endpoints,omitempty"`
	SDKKey              *string   `json:"sdk_key,omitempty"`
	CacheDir            *string   `json:"cache_dir,omitempty"`
	TLSCAPEM            *string   `json:"tls_ca_pem,omitempty"`
	TLSIdentityPEM      *[]string `json:"tls_identity_pem,omitempty"`
	ConnectTimeout      *float64  `json:"connect_timeout,omitempty"`
	KeepaliveInterval   *float64  `json:"keepalive_interval,omitempty"`
	KeepaliveTimeout    *float64  `json:"keepalive_timeout,omitempty"`
	TCPUserTimeout      *float64  `json:"tcp_user_timeout,omitempty"`
	FirstMessageTimeout *float64  `json:"first_message_timeout,omitempty"`
	HeartbeatDefault    *float64  `json:"heartbeat_default,omitempty"`
	BackoffBase         *float64  `json:"backoff_base,omitempty"`
	BackoffCap          *float64  `json:"backoff_cap,omitempty"`
	HealthyAfter        *float64  `json:"healthy_after,omitempty"`
	StallJitter         *float64  `json:"stall_jitter,omitempty"`
	StaleAfter          *float64  `json:"stale_after,omitempty"`
	CacheWriteInterval  *float64  `json:"cache_write_interval,omitempty"`
	UsageInterval       *float64  `json:"usage_interval,omitempty"`
	WatchdogMisses      *int      `json:"watchdog_misses,omitempty"`
	KeepEndpointOrder   *bool     `json:"keep_endpoint_order,omitempty"`
	UsageReports        *bool     `json:"usage_reports,omitempty"`
	TestData            *string   `json:"test_data,omitempty"`
	Validate            *bool     `json:"validate,omitempty"`
	OfflineFile         *string   `json:"offline_file,omitempty"`
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// seconds is a duration option as seconds (nil for zero: the default);
// a negative duration is refused, naming the option.
func seconds(field, key string, d time.Duration, err *error) *float64 {
	if d == 0 {
		return nil
	}
	if d < 0 && *err == nil {
		*err = invalidf("options.%s (Options.%s): a negative duration (%s)", key, field, d)
	}
	s := d.Seconds()
	return &s
}

// toJSON is o as the library's options JSON.
func (o *Options) toJSON() ([]byte, error) {
	var err error
	w := wireOptions{
		Endpoints:           o.Endpoints,
		SDKKey:              optString(o.SDKKey),
		CacheDir:            optString(o.CacheDir),
		TLSCAPEM:            optString(o.TLSCAPEM),
		ConnectTimeout:      seconds("ConnectTimeout", "connect_timeout", o.ConnectTimeout, &err),
		KeepaliveInterval:   seconds("KeepaliveInterval", "keepalive_interval", o.KeepaliveInterval, &err),
		KeepaliveTimeout:    seconds("KeepaliveTimeout", "keepalive_timeout", o.KeepaliveTimeout, &err),
		TCPUserTimeout:      seconds("TCPUserTimeout", "tcp_user_timeout", o.TCPUserTimeout, &err),
		FirstMessageTimeout: seconds("FirstMessageTimeout", "first_message_timeout", o.FirstMessageTimeout, &err),
		HeartbeatDefault:    seconds("HeartbeatDefault", "heartbeat_default", o.HeartbeatDefault, &err),
		BackoffBase:         seconds("BackoffBase", "backoff_base", o.BackoffBase, &err),
		BackoffCap:          seconds("BackoffCap", "backoff_cap", o.BackoffCap, &err),
		HealthyAfter:        seconds("HealthyAfter", "healthy_after", o.HealthyAfter, &err),
		StallJitter:         seconds("StallJitter", "stall_jitter", o.StallJitter, &err),
		StaleAfter:          seconds("StaleAfter", "stale_after", o.StaleAfter, &err),
		CacheWriteInterval:  seconds("CacheWriteInterval", "cache_write_interval", o.CacheWriteInterval, &err),
		UsageInterval:       seconds("UsageInterval", "usage_interval", o.UsageInterval, &err),
		UsageReports:        o.UsageReports,
		TestData:            optString(o.TestData),
		Validate:            o.Validate,
		OfflineFile:         optString(o.OfflineFile),
	}
	if err != nil {
		return nil, err
	}
	if o.TLSIdentity != nil {
		pair := []string{o.TLSIdentity.CertPEM, o.TLSIdentity.KeyPEM}
		w.TLSIdentityPEM = &pair
	}
	if o.WatchdogMisses < 0 {
		return nil, invalidf("options.watchdog_misses (Options.WatchdogMisses): negative (%d)", o.WatchdogMisses)
	}
	if o.WatchdogMisses > 0 {
		w.WatchdogMisses = &o.WatchdogMisses
	}
	if o.KeepEndpointOrder {
		w.KeepEndpointOrder = &o.KeepEndpointOrder
	}
	return json.Marshal(&w)
}
