//! A real PostgreSQL server for tests: `initdb` into a temporary
//! directory, started on a free port, stopped (immediately) when dropped.
//!
//! The server binaries are found with `pg_config --bindir`, else under
//! `/usr/lib/postgresql/*/bin` (Debian's `postgresql-15` package). Without
//! them, [`Postgres::start`] fails the test, saying how to install the
//! server — unless `FLAGSTREAM_SKIP_POSTGRES=1` is set, the explicit choice
//! to skip: then it prints one `SKIPPED` line to the test output and the
//! test returns early. `FLAGSTREAM_REQUIRE_POSTGRES=1` (`tests/run` sets it)
//! overrides a skip request: a missing server fails. `initdb` refuses to
//! run as root: as root the server runs as the `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running server.
#[derive(Debug)]
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether commits are flushed to disk (`fsync`): off for tests (their
    /// speed), on for benchmarks (the numbers a deployment would see).
    durable: bool,
    /// The user to run the server's tools as (`postgres` when we are root).
    as_user: Option<String>,
    /// Started with `ssl=on` (its certificates in the data directory).
    pub tls: Option<Pki>,
}

/// The certificates of a server started with [`Postgres::start_tls`].
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA (PEM) that signed the server's certificate (names
    /// `localhost` and `127.0.0.1`) and the client certificate.
    pub ca: PathBuf,
    /// Another CA, which signed nothing the server holds: a wrong
    /// `sslrootcert`.
    pub other_ca: PathBuf,
    /// A client certificate for the user `relay`, signed by the CA (the
    /// server trusts the CA for client certificates).
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
}

fn bindir() -> Option<PathBuf> {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("initdb").exists() && d.join("pg_ctl").exists());
    from_config.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists())
            .collect();
        found.sort();
        found.pop()
    })
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Postgres {
    /// Starts a server, or `None` (with one `SKIPPED` line saying so) when
    /// the binaries are missing and `FLAGSTREAM_SKIP_POSTGRES=1` asks to
    /// skip; without them and without that, the test fails.
    pub fn start() -> Option<Postgres> {
        Postgres::start_with(false, false)
    }

    /// [`Postgres::start`] with `fsync` on: for benchmarks.
    pub fn start_durable() -> Option<Postgres> {
        Postgres::start_with(true, false)
    }

    /// [`Postgres::start`] with TLS (`ssl=on`): a CA and the server's
    /// certificate generated for it ([`Postgres::tls`]). Plaintext
    /// connections are still accepted until [`Postgres::set_hba`] says
    /// otherwise.
    pub fn start_tls() -> Option<Postgres> {
        Postgres::start_with(false, true)
    }

    fn start_with(durable: bool, tls: bool) -> Option<Postgres> {
        let Some(bin) = bindir() else {
            let msg = "PostgreSQL server binaries not found (pg_config --bindir, /usr/lib/postgresql/*/bin); \
                       install them with `apt-get install postgresql-15`";
            let var = |name: &str| std::env::var(name).as_deref() == Ok("1");
            if var("FLAGSTREAM_REQUIRE_POSTGRES") || !var("FLAGSTREAM_SKIP_POSTGRES") {
                panic!(
                    "{msg}, or set FLAGSTREAM_SKIP_POSTGRES=1 to skip the PostgreSQL tests \
                     (FLAGSTREAM_REQUIRE_POSTGRES=1 overrides that)"
                );
            }
            // Straight to the process's stderr: libtest captures `eprintln!`
            // of a passing test, and a skip must be seen.
            use std::io::Write as _;
            // A failed write to stderr has nowhere else to be reported.
            let _ignored = writeln!(
                std::io::stderr(),
                "SKIPPED (FLAGSTREAM_SKIP_POSTGRES=1): this PostgreSQL test did not run: {msg}"
            );
            return None;
        };
        let as_user = is_root().then(|| "postgres".to_owned());
        let dir = tempfile::Builder::new().prefix("flagstream-pg").tempdir().expect("temp dir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data dir");
        if let Some(user) = &as_user {
            // The server's user must own its data and reach it.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let ok = Command::new("chown").args([user.as_str()]).arg(&data).status().expect("chown runs");
            assert!(ok.success(), "chown {user} {}", data.display());
        }
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let mut pg = Postgres { dir, bin, port, as_user, durable, tls: None };
        pg.run("initdb", &["-D", path(&data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        if tls {
            pg.tls = Some(pg.make_pki());
        }
        pg.ctl_start();
        pg.sql("postgres", "SELECT 1");
        Some(pg)
    }

    fn command(&self, tool: &str) -> Command {
        match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(self.bin.join(tool));
                c
            }
            None => Command::new(self.bin.join(tool)),
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self.command(tool).args(args).output().unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn ctl_start(&self) {
        let data = self.data();
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200",
            self.port,
            data.display(),
            if self.durable { "on" } else { "off" }
        );
        if self.tls.is_some() {
            // server.crt and server.key in the data directory are the
            // defaults of ssl_cert_file and ssl_key_file.
            opts.push_str(" -c ssl=on -c ssl_ca_file=root.crt");
        }
        let log = data.join("server.log");
        self.run("pg_ctl", &["-D", path(&data), "-o", &opts, "-l", path(&log), "-w", "-t", "60", "start"]);
    }

    /// Stops the server: `fast` (clean) or `immediate` (a crash: WAL
    /// recovery at the next start).
    pub fn stop(&self, mode: &str) {
        self.run("pg_ctl", &["-D", path(&self.data()), "-m", mode, "-w", "stop"]);
    }

    /// Starts it again on the same port and data.
    pub fn start_again(&self) {
        self.ctl_start();
    }

    /// Generates the CA, the server's certificate and key (into the data
    /// directory, owned by the server's user, 0600) and a client
    /// certificate; returns where the client side's files are.
    fn make_pki(&self) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
            KeyPair,
        };
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
        };
        let (good, other) = (ca("flagstream test CA"), ca("some other CA"));
        let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(names).expect("params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            (params.signed_by(&key, &good).expect("signed").pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(Vec::new(), "relay", ExtendedKeyUsagePurpose::ClientAuth);
        let data = self.data();
        let server_files =
            [("server.crt", server_cert), ("server.key", server_key), ("root.crt", good.pem())];
        for (name, text) in server_files {
            let p = data.join(name);
            std::fs::write(&p, text).expect("server TLS file");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            if let Some(user) = &self.as_user {
                let ok = Command::new("chown").arg(user).arg(&p).status().expect("chown runs");
                assert!(ok.success(), "chown {user} {}", p.display());
            }
        }
        let write = |name: &str, text: &str| {
            let p = self.dir.path().join(name);
            std::fs::write(&p, text).expect("client TLS file");
            p
        };
        Pki {
            ca: write("ca.pem", &good.pem()),
            other_ca: write("other-ca.pem", &other.pem()),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }

    /// Replaces the server's `pg_hba.conf` with `lines` and reloads it
    /// (e.g. `hostssl all all 127.0.0.1/32 trust`: TLS connections only).
    pub fn set_hba(&self, lines: &str) {
        let file = self.data().join("pg_hba.conf");
        let loaded = self.sql("postgres", "SELECT pg_conf_load_time()");
        // Rewritten in place: the file keeps its owner.
        std::fs::write(&file, format!("local all all trust\n{lines}\n")).expect("pg_hba.conf");
        self.run("pg_ctl", &["-D", path(&self.data()), "reload"]);
        // The reload is a signal: wait until the server says it reloaded.
        for _ in 0..200 {
            if self.sql("postgres", "SELECT pg_conf_load_time()") != loaded {
                return;
            }
            // PostgreSQL signals a reload to no one: its load time is polled.
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("the server did not reload pg_hba.conf");
    }

    /// Creates database `name`; returns its URL.
    pub fn database(&self, name: &str) -> String {
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(name)
    }

    /// Creates login role `role` with only table privileges on the tables
    /// database `db` has now (no CREATE, no sequence, no superuser), as
    /// OPERATIONS.md §8.3 allows for relays on a migrated database; returns
    /// the database's URL as that role.
    pub fn table_privileges_role(&self, db: &str, role: &str) -> String {
        self.sql(
            db,
            &format!(
                "CREATE ROLE {role} LOGIN;
                 REVOKE CREATE ON SCHEMA public FROM PUBLIC;
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};"
            ),
        );
        format!("postgres://{role}@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Runs SQL in database `db` with psql; returns its unaligned output.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let psql = self.bin.join("psql");
        let psql = if psql.exists() { psql } else { PathBuf::from("psql") };
        let out = Command::new(psql)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-At",
                "-c",
                sql,
            ])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Postgres {
    /// Dumps database `db` (custom format) into a file here; returns it.
    pub fn dump(&self, db: &str) -> PathBuf {
        let file = self.dir.path().join(format!("{db}.dump"));
        let out = Command::new(self.bin.join("pg_dump"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-Fc",
                "-f",
                path(&file),
                db,
            ])
            .output()
            .expect("pg_dump runs");
        assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
        file
    }

    /// Restores `file` over database `db` (its tables dropped and made
    /// again: a restored backup).
    pub fn restore(&self, db: &str, file: &Path) {
        let out = Command::new(self.bin.join("pg_restore"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "--clean",
                "--if-exists",
                "-d",
                db,
            ])
            .arg(file)
            .output()
            .expect("pg_restore runs");
        assert!(out.status.success(), "pg_restore: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Immediate: nothing here needs a clean shutdown. A server that is
        // already down makes pg_ctl fail, which is fine at teardown.
        let _ =
            self.command("pg_ctl").args(["-D", path(&self.data()), "-m", "immediate", "-w", "stop"]).output();
    }
}

/// A streaming standby of a [`Postgres`] server (`pg_basebackup -R`),
/// which the primary waits for at every commit (`synchronous_standby_names`):
/// while it is stopped, a `COMMIT` on the primary is durable there but does
/// not return, and the transaction stays open (its rows invisible, its
/// locks held) until the standby is back. Stopped when dropped.
#[derive(Debug)]
pub struct Standby {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_user: Option<String>,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

/// The name the standby connects with, which the primary waits for.
const STANDBY_NAME: &str = "flagstream_standby";

impl Postgres {
    /// Makes a streaming standby of this server from a base backup, starts
    /// it, makes it the synchronous standby every commit waits for, and
    /// waits until it streams synchronously.
    pub fn synchronous_standby(&self) -> Standby {
        let dir = tempfile::Builder::new().prefix("flagstream-pg-standby").tempdir().expect("temp dir");
        if self.as_user.is_some() {
            // pg_basebackup, run as the server's user, makes the data
            // directory (with the modes the server wants) in here.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let standby = Standby { dir, bin: self.bin.clone(), as_user: self.as_user.clone(), port };
        let data = standby.data();
        let primary_port = self.port.to_string();
        self.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-D",
                path(&data),
                "-R",
                "-X",
                "stream",
            ],
        );
        standby.start_again();
        self.sql("postgres", &format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"));
        self.sql("postgres", "SELECT pg_reload_conf()");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let state = self.sql(
                "postgres",
                &format!(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
                ),
            );
            if state.trim() == "sync" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the standby never became synchronous: {state:?}");
            // The standby's state is only readable by query: polled, bounded
            // by the deadline above (a failure guard, not a timing assert).
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        standby
    }

    /// Whether a backend of database `db` is waiting for the synchronous
    /// standby to confirm a commit (`wait_event = 'SyncRep'`).
    pub fn commit_waits_for_standby(&self, db: &str) -> bool {
        let n = self.sql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND wait_event = 'SyncRep'"
            ),
        );
        n.trim() != "0"
    }
}

impl Standby {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, tool: &str) -> Command {
        match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(self.bin.join(tool));
                c
            }
            None => Command::new(self.bin.join(tool)),
        }
    }

    fn ctl(&self, args: &[&str]) {
        let data = self.data();
        let out = self
            .command("pg_ctl")
            .args(["-D", path(&data)])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("pg_ctl: {e}"));
        assert!(
            out.status.success(),
            "pg_ctl {args:?} (standby) failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops the standby (`fast`): commits on the primary wait from now on.
    pub fn stop(&self) {
        self.ctl(&["-m", "fast", "-w", "stop"]);
    }

    /// Starts it again: it catches up, and the waiting commits return.
    pub fn start_again(&self) {
        let data = self.data();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c cluster_name={STANDBY_NAME}",
            self.port,
            data.display()
        );
        let log = data.join("server.log");
        self.ctl(&["-o", &opts, "-l", path(&log), "-w", "-t", "60", "start"]);
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        // A standby already stopped makes pg_ctl fail: fine at teardown.
        let _ =
            self.command("pg_ctl").args(["-D", path(&self.data()), "-m", "immediate", "-w", "stop"]).output();
    }
}

/// A psql session holding a transaction open (and every lock it took)
/// until dropped: a lock that makes the relays' queries on that table
/// wait.
#[derive(Debug)]
pub struct Held {
    child: std::process::Child,
}

impl Postgres {
    /// Opens a psql session on database `db`, begins a transaction and runs
    /// `statement` in it (e.g. `LOCK TABLE t IN ACCESS EXCLUSIVE MODE`),
    /// leaving it open. Wait for its effect with [`Postgres::table_locked`].
    pub fn hold(&self, db: &str, statement: &str) -> Held {
        use std::io::Write as _;
        let psql = self.bin.join("psql");
        let psql = if psql.exists() { psql } else { PathBuf::from("psql") };
        let mut child = Command::new(psql)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-d", db, "-q"])
            .args(["-v", "ON_ERROR_STOP=1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("psql runs");
        let stdin = child.stdin.as_mut().expect("psql's stdin");
        writeln!(stdin, "BEGIN;\n{statement};").expect("write to psql");
        stdin.flush().expect("flush to psql");
        Held { child }
    }

    /// Whether some session holds `table` of database `db` in ACCESS
    /// EXCLUSIVE mode.
    pub fn table_locked(&self, db: &str, table: &str) -> bool {
        let n = self.sql(
            db,
            &format!(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' AND l.granted"
            ),
        );
        n.trim() != "0"
    }

    /// How many sessions named `application` wait for a lock.
    pub fn waiting_for_locks(&self, application: &str) -> usize {
        let n = self.sql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}' AND wait_event_type = 'Lock'"
            ),
        );
        n.trim().parse().expect("a count")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Closing its input ends psql, and the open transaction with it.
        drop(self.child.stdin.take());
        if self.child.wait().is_err() {
            eprintln!("the psql holding a lock could not be waited for");
        }
    }
}
