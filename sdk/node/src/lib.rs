//! flagstream for Node.js: the Rust [`flagstream::Client`] behind N-API.
//!
//! The addon owns a Tokio runtime (two worker threads named `flagstream`,
//! registered with napi-rs at module load) on which every client's sync
//! task, cache writer and change forwarder run; the JS thread never does
//! network I/O. Evaluations are synchronous calls: the JS object context is
//! read into a [`flagstream::Context`] (or a prebuilt [`context::JsContext`]
//! is borrowed) and the client evaluates it in process memory.
//!
//! Change notifications reach the JS thread through a *weak* threadsafe
//! function (it never holds the event loop open); the forwarder sends one
//! change at a time and waits for the JS side to take it, so the only
//! queue is the client's bounded change buffer (64 revisions; a listener
//! further behind gets a `lagged` event). The function's callback holds
//! the JS client only through a `WeakRef` (index.js), so a client that
//! nothing references (and nothing listens to) is collected, and this
//! module's `Drop` stops it.
//!
//! `close()` releases the forwarder and the hot path's handle at once and
//! returns a promise: the Rust client's `close` sends the final usage
//! summary (waiting at most 2 s for the relay), stops the sync and writes
//! the cache on the runtime; the promise resolves to whether the relay
//! confirmed. Nothing of a closed client keeps the process alive once that
//! promise settles. `index.js` wraps this in the JS API (EventEmitter,
//! options, OpenFeature).

use std::sync::Arc;

use flagstream::{Client, Context, Status};
use napi::bindgen_prelude::{BigInt, Env, Object, PromiseRaw, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result};
use napi_derive::napi;
use serde_json::Value as Json;

mod detail;
mod fast;
mod js_context;
mod napi_value;
mod options;
mod report;
mod tables;
mod values;

use options::{NativeOptions, builder, flag_set, ms};
use report::{JsStats, JsStatus, js_stats, js_status};

/// How long `close()` waits for the relay to confirm the final usage
/// summary.
const CLOSE_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Registers the addon's runtime with napi-rs (`spawn_future`, `spawn`).
#[napi_derive::module_init]
fn init() {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("flagstream")
        .enable_all()
        .build()
    {
        Ok(rt) => napi::bindgen_prelude::create_custom_tokio_runtime(rt),
        // napi-rs then builds its default runtime on first use.
        Err(e) => eprintln!("flagstream: could not build the addon's runtime ({e}); using napi-rs's default"),
    }
}

fn type_error(msg: impl Into<String>) -> Error {
    Error::new(napi::Status::InvalidArg, msg.into())
}

/// `r`, with an argument error (a bad context, default or option: the
/// caller's bug) thrown as a JS `TypeError` rather than a plain `Error`.
fn js<T>(env: &Env, r: Result<T>) -> Result<T> {
    r.map_err(|e| {
        if e.status != napi::Status::InvalidArg {
            return e;
        }
        let reason = e.reason.clone();
        // SAFETY: `env` is the env of the running call, on its JS thread.
        unsafe { napi::JsTypeError::from(e).throw_into(env.raw()) };
        // Already thrown: napi-rs does not throw a pending exception again.
        Error::new(napi::Status::PendingException, reason)
    })
}

/// An error with its chain of causes (`BuildError::File` names the file;
/// its source says what is wrong with it).
fn error(e: impl std::error::Error) -> Error {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    Error::from_reason(msg)
}

/// A JS context: a prebuilt context's id (index.js passes `Context`s so)
/// or an object in the object form (`fast.rs`).
type Ctx<'e> = Unknown<'e>;

/// Reads `ctx` and runs `f` on it.
fn with_ctx<R>(env: &Env, ctx: &Ctx<'_>, f: impl FnOnce(&Context<'_>) -> R) -> Result<R> {
    use napi::bindgen_prelude::JsValue;
    // SAFETY: `ctx` is a live value of this call's env.
    unsafe { js_context::with_context(env.raw(), ctx.raw(), f) }.map_err(|e| type_error(e.0))
}

/// An integer default from a JS number: it must be a whole number in the
/// i64 range (`bigint*` take exact 64-bit defaults).
pub(crate) fn int_default(d: f64) -> Result<i64> {
    if d.fract() != 0.0 || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&d) {
        return Err(type_error(format!("default {d} is not a whole number in the 64-bit range")));
    }
    Ok(d as i64)
}

fn bigint_default(d: &BigInt) -> Result<i64> {
    match d.get_i64() {
        (v, true) => Ok(v),
        _ => Err(type_error("default bigint is outside the signed 64-bit range")),
    }
}

/// One applied revision: its number and the flags it changed. `lagged`:
/// the listener fell more than 64 revisions behind and missed `lagged`
/// of them (`revision` and `flags` are then empty; index.js fills them in
/// from the current snapshot).
#[napi(object)]
pub struct ChangeEvent {
    pub revision: f64,
    pub flags: Vec<String>,
    pub lagged: f64,
}

type ChangeFn = ThreadsafeFunction<ChangeEvent, Unknown<'static>, ChangeEvent, napi::Status, false, true>;

/// The native client (index.js wraps it as `Client`).
#[napi]
pub struct NativeClient {
    client: Option<Client>,
    /// Its id in `tables::TABLES.clients` (the hot path's handle on a clone).
    id: u32,
    /// The counters at `close()`, served afterwards.
    final_stats: flagstream::Stats,
    forwarder: Option<tokio::task::AbortHandle>,
}

/// Which typed accessor a generic detail call stands for.
enum Typed {
    Bool(bool),
    Str(String),
    Int(i64),
    BigInt(i64),
    Float(f64),
    Json(Json),
}

fn typed_default(env: &Env, kind: &str, default: Unknown<'_>) -> Result<Typed> {
    use napi::bindgen_prelude::{FromNapiValue, JsValue};
    let wrong = |e: Error| type_error(format!("the default of a {kind} evaluation: {}", e.reason));
    // SAFETY (each arm): `default` is a live value of this call's env; a
    // value of another type is refused by `from_napi_value` with an error.
    unsafe {
        Ok(match kind {
            "bool" => Typed::Bool(bool::from_napi_value(env.raw(), default.raw()).map_err(wrong)?),
            "string" => Typed::Str(String::from_napi_value(env.raw(), default.raw()).map_err(wrong)?),
            "int" => Typed::Int(int_default(f64::from_napi_value(env.raw(), default.raw()).map_err(wrong)?)?),
            "bigint" => Typed::BigInt(bigint_default(
                &BigInt::from_napi_value(env.raw(), default.raw()).map_err(wrong)?,
            )?),
            "number" => Typed::Float(f64::from_napi_value(env.raw(), default.raw()).map_err(wrong)?),
            "json" => Typed::Json(match default.get_type()? {
                napi::ValueType::Undefined => Json::Null,
                _ => env.from_js_value(default).map_err(wrong)?,
            }),
            other => return Err(type_error(format!("unknown type {other:?}"))),
        })
    }
}

/// Evaluates `t` on `snap` at `now` (Unix ms; `None`: the system clock)
/// and makes the JS result.
fn snapshot_detail<'e>(
    env: &'e Env,
    snap: &flagstream::Snapshot,
    key: &str,
    ctx: &Context<'_>,
    t: Typed,
    now: Option<i64>,
    stale: bool,
) -> Result<Object<'e>> {
    fn at<'s, T: flagstream::FromValue<'s>>(
        snap: &'s flagstream::Snapshot,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        now: Option<i64>,
        stale: bool,
    ) -> (T, detail::Fields) {
        let mut d = match now {
            Some(t) => snap.detail_at(key, ctx, default, t),
            None => snap.detail(key, ctx, default),
        };
        d.stale = stale;
        detail::borrowed(d)
    }
    match t {
        Typed::Bool(d) => {
            let (v, f) = at(snap, key, ctx, d, now, stale);
            detail::to_object(env, v, f)
        }
        Typed::Str(d) => {
            let (v, f) = at(snap, key, ctx, d.as_str(), now, stale);
            detail::to_object(env, v, f)
        }
        Typed::Int(d) => {
            let (v, f) = at(snap, key, ctx, d, now, stale);
            detail::to_object(env, v, f)
        }
        Typed::BigInt(d) => {
            let (v, f) = at(snap, key, ctx, d, now, stale);
            detail::to_object(env, BigInt::from(v), f)
        }
        Typed::Float(d) => {
            let (v, f) = at(snap, key, ctx, d, now, stale);
            detail::to_object(env, v, f)
        }
        Typed::Json(d) => {
            let (v, f) = at(snap, key, ctx, std::borrow::Cow::Owned(d), now, stale);
            detail::to_object(env, v.into_owned(), f)
        }
    }
}

fn not_ready_detail(env: &Env, t: Typed) -> Result<Object<'_>> {
    match t {
        Typed::Bool(d) => obj(env, detail::not_ready(d)),
        Typed::Str(d) => obj(env, detail::not_ready(d)),
        Typed::Int(d) => obj(env, detail::not_ready(d)),
        Typed::BigInt(d) => obj(env, detail::not_ready(BigInt::from(d))),
        Typed::Float(d) => obj(env, detail::not_ready(d)),
        Typed::Json(d) => obj(env, detail::not_ready(d)),
    }
}

fn obj<V: ToNapiValue>(env: &Env, (v, f): (V, detail::Fields)) -> Result<Object<'_>> {
    detail::to_object(env, v, f)
}

#[napi]
impl NativeClient {
    /// Builds the client on the addon's runtime; returns at once (a cache
    /// is read first, synchronously).
    #[napi(constructor)]
    pub fn new(env: Env, options: NativeOptions) -> Result<Self> {
        let b = js(&env, builder(options))?;
        let client = napi::bindgen_prelude::within_runtime_if_available(|| b.build()).map_err(error)?;
        let id = tables::TABLES.with(|t| t.clients.borrow_mut().insert(client.clone()));
        Ok(NativeClient {
            client: Some(client),
            id,
            final_stats: flagstream::Stats::default(),
            forwarder: None,
        })
    }

    /// The id `fast.rs`'s functions take.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Starts sending every applied revision to `callback` (once).
    #[napi]
    pub fn listen(&mut self, callback: ChangeFn) -> Result<()> {
        let Some(client) = &self.client else { return Ok(()) };
        if self.forwarder.is_some() {
            return Err(Error::from_reason("already listening"));
        }
        let mut changes = client.changes();
        let task = napi::bindgen_prelude::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let event = match changes.recv().await {
                    Ok(c) => {
                        ChangeEvent { revision: c.revision as f64, flags: c.flags.to_vec(), lagged: 0.0 }
                    }
                    Err(RecvError::Lagged(n)) => {
                        ChangeEvent { revision: 0.0, flags: Vec::new(), lagged: n as f64 }
                    }
                    // The client is gone (closed).
                    Err(RecvError::Closed) => return,
                };
                let (taken, taken_rx) = tokio::sync::oneshot::channel();
                let status = callback.call_with_return_value(
                    event,
                    ThreadsafeFunctionCallMode::NonBlocking,
                    move |_returned, _env| {
                        // The forwarder may be gone (closed): nobody to tell.
                        let _ = taken.send(());
                        Ok(())
                    },
                );
                if status != napi::Status::Ok {
                    // The environment is closing.
                    return;
                }
                if taken_rx.await.is_err() {
                    // The call was dropped (the environment is closing).
                    return;
                }
            }
        });
        self.forwarder = Some(task.abort_handle());
        Ok(())
    }

    /// Resolves to whether data is served, as soon as it is or after
    /// `timeoutMs`. Holds only a status receiver, so `close()` ends it.
    #[napi]
    pub fn wait_ready<'e>(&self, env: &'e Env, timeout_ms: f64) -> Result<PromiseRaw<'e, bool>> {
        let timeout = ms("timeoutMs", timeout_ms)?;
        let rx = self.client.as_ref().map(Client::status_watch);
        env.spawn_future(async move {
            let Some(mut rx) = rx else { return Ok(false) };
            if rx.borrow().has_data() {
                return Ok(true);
            }
            // A timeout or a closed client: not ready.
            Ok(matches!(tokio::time::timeout(timeout, rx.wait_for(Status::has_data)).await, Ok(Ok(_))))
        })
    }

    #[napi]
    pub fn bigint(&self, env: Env, key: String, ctx: Ctx<'_>, default: BigInt) -> Result<BigInt> {
        let d = js(&env, bigint_default(&default))?;
        let Some(c) = &self.client else { return Ok(default) };
        js(&env, with_ctx(&env, &ctx, |x| BigInt::from(c.int(&key, x, d))))
    }

    #[napi]
    pub fn json(&self, env: Env, key: String, ctx: Ctx<'_>, default: Option<Json>) -> Result<Json> {
        let d = default.unwrap_or(Json::Null);
        let Some(c) = &self.client else { return Ok(d) };
        js(&env, with_ctx(&env, &ctx, |x| c.json(&key, x, d)))
    }

    /// Any typed result with its reason: `kind` is `bool`, `string`,
    /// `int`, `bigint`, `number` or `json`; `now` (Unix ms) evaluates
    /// schedules at that instant instead of the system clock (such a call
    /// reads the snapshot directly and is not counted in `stats()`).
    #[napi]
    pub fn detail<'e>(
        &self,
        env: &'e Env,
        kind: String,
        key: String,
        ctx: Ctx<'_>,
        default: Unknown<'_>,
        now: Option<f64>,
    ) -> Result<Object<'e>> {
        js(env, self.detail_inner(env, kind, key, ctx, default, now))
    }

    fn detail_inner<'e>(
        &self,
        env: &'e Env,
        kind: String,
        key: String,
        ctx: Ctx<'_>,
        default: Unknown<'_>,
        now: Option<f64>,
    ) -> Result<Object<'e>> {
        let t = typed_default(env, &kind, default)?;
        let Some(c) = &self.client else { return not_ready_detail(env, t) };
        with_ctx(env, &ctx, |ctx| self.detail_with(env, c, t, &key, ctx, now))?
    }

    fn detail_with<'e>(
        &self,
        env: &'e Env,
        c: &Client,
        t: Typed,
        key: &str,
        ctx: &Context<'_>,
        now: Option<f64>,
    ) -> Result<Object<'e>> {
        if let Some(now) = now {
            let status = c.status();
            if !status.has_data() {
                return not_ready_detail(env, t);
            }
            let now = int_default(now.floor())?;
            return snapshot_detail(env, &c.snapshot(), key, ctx, t, Some(now), status.is_stale());
        }
        match t {
            Typed::Bool(d) => obj(env, detail::owned(c.bool_detail(key, ctx, d))),
            Typed::Str(d) => obj(env, detail::owned(c.string_detail(key, ctx, &d))),
            Typed::Int(d) => obj(env, detail::owned(c.int_detail(key, ctx, d))),
            Typed::BigInt(d) => {
                let (v, f) = detail::owned(c.int_detail(key, ctx, d));
                detail::to_object(env, BigInt::from(v), f)
            }
            Typed::Float(d) => obj(env, detail::owned(c.float_detail(key, ctx, d))),
            Typed::Json(d) => obj(env, detail::owned(c.json_detail(key, ctx, d))),
        }
    }

    #[napi]
    pub fn status(&self) -> JsStatus {
        match &self.client {
            Some(c) => js_status(c.status()),
            None => js_status(Status::Failed { reason: "closed".into() }),
        }
    }

    #[napi]
    pub fn stats(&self) -> JsStats {
        match &self.client {
            Some(c) => js_stats(&c.stats()),
            None => js_stats(&self.final_stats),
        }
    }

    /// The served revision and every flag key (for a lagged listener).
    #[napi]
    pub fn flag_keys(&self) -> Vec<String> {
        self.client.as_ref().map_or_else(Vec::new, |c| c.snapshot().keys().map(str::to_owned).collect())
    }

    /// The served snapshot's revision (0 before data or after close).
    #[napi]
    pub fn revision(&self) -> f64 {
        self.client.as_ref().map_or(0.0, |c| c.snapshot().revision() as f64)
    }

    /// The served snapshot's store epoch (with an evaluation's revision,
    /// the data's version): empty before data, for test data and flag
    /// files (no store), and after close.
    #[napi]
    pub fn epoch(&self) -> String {
        self.client.as_ref().map_or_else(String::new, |c| c.snapshot().epoch().to_owned())
    }

    /// How old the served data may be (ms), `null` when no relay ever
    /// confirmed it (`flagstream::Client::data_age`).
    #[napi]
    pub fn data_age_ms(&self) -> Option<f64> {
        self.client.as_ref().and_then(Client::data_age).map(|d| d.as_millis() as f64)
    }

    /// The flags served now, in the file form (`{flags, segments}`).
    #[napi]
    pub fn flag_set(&self) -> Result<Json> {
        // A closed client serves no flags: the empty set.
        let set = self.client.as_ref().map(|c| c.snapshot().to_flag_set()).unwrap_or_default();
        serde_json::to_value(&set).map_err(error)
    }

    /// Closes the client: at once, the change forwarder is released, the
    /// hot path's handle removed and the counters kept (evaluations
    /// return their defaults from now on); then, on the addon's runtime,
    /// the usage counted since the last summary is sent to the relay, the
    /// sync stops and the cache is written ([`flagstream::Client::close`],
    /// waiting at most [`CLOSE_FLUSH`] for the relay). Resolves to whether
    /// the relay confirmed the final summary (`false` without a relay
    /// stream, or when closed already). The pending promise keeps the
    /// event loop alive, so a process that calls `close()` without
    /// awaiting it still sends its final usage before it exits.
    #[napi]
    pub fn close<'e>(&mut self, env: &'e Env) -> Result<PromiseRaw<'e, bool>> {
        let client = self.stop();
        env.spawn_future(async move {
            let Some(c) = client else { return Ok(false) };
            Ok(c.close(CLOSE_FLUSH).await)
        })
    }

    /// What closing does at once (see `close`); the client, unless closed
    /// already.
    fn stop(&mut self) -> Option<Client> {
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
        let c = self.client.take()?;
        self.final_stats = c.stats();
        drop(tables::TABLES.with(|t| t.clients.borrow_mut().remove(self.id)));
        Some(c)
    }
}

impl Drop for NativeClient {
    /// A client collected without `close()` (index.js holds its clients
    /// only weakly from the change forwarder): the forwarder and the
    /// hot-path handle go, and the last handle's drop stops the tasks,
    /// writes the cache and leaves the final usage summary to a bounded
    /// flush on the runtime (at most 2 s, not waited for).
    fn drop(&mut self) {
        drop(self.stop());
    }
}

/// The hot-path functions (`fast.rs`): `bool`, `number`, `int`, `string`
/// taking `(clientId, key, ctx, default)`, `contextNew`, `contextFree`.
#[napi]
pub fn fast_api(env: &Env) -> Result<Object<'_>> {
    fast::api(env)
}

/// A prebuilt context's file form, key and kind (`Context#toJSON`).
#[napi]
pub fn context_info(id: u32) -> Result<Json> {
    tables::TABLES.with(|t| match t.contexts.borrow().get(id) {
        Some(c) => {
            let file = serde_json::to_value(c).map_err(error)?;
            let kind = if c.is_multi() { "multi" } else { c.context_kind() };
            Ok(serde_json::json!({ "key": c.key(), "kind": kind, "file": file }))
        }
        None => Err(type_error("the Context is gone")),
    })
}

/// A compiled flag set, evaluated without a client: `flagctl eval` in
/// process, and the conformance suite's files whose flags deliberately fail
/// validation (`Snapshot.compile(set, {validate: false})`).
#[napi(js_name = "Snapshot")]
pub struct JsSnapshot {
    inner: Arc<flagstream::Snapshot>,
}

#[napi]
impl JsSnapshot {
    /// Compiles `{flags, segments}` (the file form, or its YAML/JSON text), validating it unless
    /// `validate` is false; a flag set that does not validate throws.
    #[napi(factory)]
    pub fn compile(env: Env, set: String, validate: Option<bool>) -> Result<Self> {
        let set = js(&env, flag_set("flag set", &set))?;
        let limits = flagstream::Limits::default();
        let snap = if validate.unwrap_or(true) {
            flagstream::Snapshot::compile(&set, &limits).map_err(error)?
        } else {
            flagstream::Snapshot::compile_unvalidated(&set, &limits)
        };
        Ok(JsSnapshot { inner: Arc::new(snap) })
    }

    /// As `Client.detail`, on this snapshot (`now`: Unix ms).
    #[napi]
    pub fn detail<'e>(
        &self,
        env: &'e Env,
        kind: String,
        key: String,
        ctx: Ctx<'_>,
        default: Unknown<'_>,
        now: Option<f64>,
    ) -> Result<Object<'e>> {
        let r = (|| {
            let t = typed_default(env, &kind, default)?;
            let now = now.map(|n| int_default(n.floor())).transpose()?;
            with_ctx(env, &ctx, |x| snapshot_detail(env, &self.inner, &key, x, t, now, false))?
        })();
        js(env, r)
    }
}

/// Why `kind` cannot name a context kind, or `null` when it can
/// (docs/EVALUATION.md "Context kinds"; the OpenFeature provider skips
/// such kinds as the Rust provider does).
#[napi]
pub fn kind_problem(kind: String) -> Option<String> {
    flagstream::reference::kind_problem(&kind)
}
