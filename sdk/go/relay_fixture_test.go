package flagstream_test

// Fixtures for the real-relay tests: relay processes (the `relay` binary
// the tests crate builds, FLAGSTREAM_RELAY_BIN), `flagctl` for writes
// (FLAGSTREAM_FLAGCTL_BIN), and a TCP proxy that can blackhole. Without
// the binaries the tests fail, never skip.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	flagstream "github.com/flagstream/flagstream/sdk/go"
)

// step bounds any wait on an event before a test fails: generous on a
// loaded 2-core machine, never a timing assertion.
const step = 60 * time.Second

func binary(t *testing.T, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Fatalf("%s must name the built binary (cargo test -p flagstream-tests --test bindings go_sdk sets it)", env)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return path
}

// relay is one relay process on 127.0.0.1 with the demo environment.
type relay struct {
	t       *testing.T
	dir     string
	data    string
	cmd     *exec.Cmd
	grpc    string
	admin   string
	drained chan struct{}
	once    sync.Once
}

// startRelay starts a relay whose files are under dir (its data in
// dir/data: a restart with the same dir keeps them); it is killed when
// the test ends.
func startRelay(t *testing.T, dir string) *relay {
	t.Helper()
	bin := binary(t, "FLAGSTREAM_RELAY_BIN")
	r := &relay{t: t, dir: dir, data: filepath.Join(dir, "data"), drained: make(chan struct{})}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "relay.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	r.cmd = exec.Command(bin, "serve", "--metrics-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
		"--data-dir", r.data, "--demo", "true")
	r.cmd.Env = append(os.Environ(), "RUST_LOG=info")
	r.cmd.Stderr = log
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	lines := bufio.NewReader(stdout)
	found := make(chan string, 1)
	go func() {
		defer close(r.drained)
		for {
			line, err := lines.ReadString('\n')
			if strings.HasPrefix(line, "flagstream-relay listening") {
				found <- line
				break
			}
			if err != nil {
				close(found)
				return
			}
		}
		// Keep draining stdout so the relay never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, lines)
	}()
	select {
	case line, ok := <-found:
		if !ok {
			logText, _ := os.ReadFile(logPath)
			t.Fatalf("the relay did not start:\n%s", logText)
		}
		for _, w := range strings.Fields(line) {
			if k, v, ok := strings.Cut(w, "="); ok {
				switch k {
				case "grpc":
					r.grpc = v
				case "admin":
					r.admin = v
				}
			}
		}
		if r.grpc == "" {
			t.Fatalf("no grpc= in %q", line)
		}
	case <-time.After(step):
		r.kill()
		logText, _ := os.ReadFile(logPath)
		t.Fatalf("the relay did not say it listens within %s:\n%s", step, logText)
	}
	return r
}

// url is the relay's gRPC URL.
func (r *relay) url() string { return "http://" + r.grpc }

func (r *relay) readFile(name string) string {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join(r.data, name))
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// sdkKey is the demo environment's SDK key.
func (r *relay) sdkKey() string { return r.readFile("demo-sdk-key") }

// flagctl runs flagctl against this relay in the demo environment.
func (r *relay) flagctl(args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), step)
	defer cancel()
	all := append([]string{"--relay", r.url(), "--token", r.readFile("admin-token"), "--config", "/nonexistent/flagctl.toml"}, args...)
	cmd := exec.CommandContext(ctx, binary(r.t, "FLAGSTREAM_FLAGCTL_BIN"), all...)
	cmd.Env = append(os.Environ(), "FLAGSTREAM_ENV=demo")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("flagctl %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// end sends sig and waits for the process (and its stdout) to end.
func (r *relay) end(sig os.Signal) {
	r.once.Do(func() {
		_ = r.cmd.Process.Signal(sig)
		select {
		case <-r.drained:
		case <-time.After(step):
			_ = r.cmd.Process.Kill()
			<-r.drained
		}
		_ = r.cmd.Wait()
	})
}

// stop shuts the relay down cleanly (SIGTERM) and waits.
func (r *relay) stop() { r.end(syscall.SIGTERM) }

// kill kills the relay (SIGKILL) and waits.
func (r *relay) kill() { r.end(syscall.SIGKILL) }

// copyDir copies the files under src to dst (a relay's store, so that a
// second relay has the same epoch).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// proxy is a TCP proxy to a target that can stop forwarding without
// closing anything (a blackhole: no FIN, no RST), like a dead network
// path.
type proxy struct {
	ln         net.Listener
	target     string
	blackholed atomic.Bool
	mu         sync.Mutex
	conns      []net.Conn
	closed     bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

// blackhole: from now on nothing is forwarded either way, and new
// connections are accepted but never answered.
func (p *proxy) blackhole() { p.blackholed.Store(true) }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) || p.blackholed.Load() {
			continue // held open, never answered
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(u) {
			continue
		}
		go p.pump(c, u)
		go p.pump(u, c)
	}
}

func (p *proxy) pump(src, dst net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if p.blackholed.Load() {
			return // stop reading: both sockets stay open, silent
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
}

// relayClient makes a client; it is closed when the test ends.
func relayClient(t *testing.T, o flagstream.Options) *flagstream.Client {
	t.Helper()
	c, err := flagstream.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func waitReady(t *testing.T, c *flagstream.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), step)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		st, rev, serr := c.Status()
		t.Fatalf("no data: %v (status %v at %d, %v)", err, st, rev, serr)
	}
}

// flagEvent is closed when an applied change names key.
func flagEvent(t *testing.T, c *flagstream.Client, key string) <-chan struct{} {
	t.Helper()
	ev := make(chan struct{})
	var once sync.Once
	unsubscribe, err := c.OnChange(func(ch flagstream.Change) {
		for _, k := range ch.Flags {
			if k == key {
				once.Do(func() { close(ev) })
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsubscribe)
	return ev
}

func waitFor(t *testing.T, ev <-chan struct{}, what string, c *flagstream.Client) {
	t.Helper()
	select {
	case <-ev:
	case <-time.After(step):
		st, rev, _ := c.Status()
		stats, _ := c.Stats()
		t.Fatalf("%s did not happen within %s (status %v at %d; %+v)", what, step, st, rev, stats)
	}
}

// user42 is the demo's enterprise user in the US.
func user42(t *testing.T) *flagstream.Context {
	return newContext(t, "user-42", map[string]string{"country": "US", "plan": "enterprise"})
}

func stats(t *testing.T, c *flagstream.Client) flagstream.Stats {
	t.Helper()
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func describe(s flagstream.Stats) string { return fmt.Sprintf("%+v", s) }
