//! The Admin gRPC service: translates requests into store operations and
//! store state into responses, after checking the caller's role and
//! environments (`access.rs`; the interceptor in `auth.rs` authenticates).
//! Error mapping is `error.rs`; message conversions `admin/convert.rs`;
//! the key, token and audit-chain calls are in `admin/access.rs`,
//! `Evaluate` in `admin/evaluate.rs`, `WatchPropagation` in
//! `admin/watch.rs`.
//!
//! May use every part but the server: `store` (writes and reads),
//! `access`, `stream` (the hub, quotas), `cluster` (the relay tree),
//! `usage`, `error`, `config`, `ops`.

mod access;
pub(crate) mod auth;
mod convert;
mod evaluate;
mod page;
mod watch;

pub(crate) use convert::op_from_proto;
pub(crate) use watch::Watches;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flagstream::wire;
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_server::Admin;
use tonic::{Request, Response, Status};

use crate::access::{Principal, Role, Tokens};
use crate::error::{Refusal, invalid};
use crate::store::state::Kind;
use crate::store::{Env, Op, Source as StoreSource, Store, Who, WriteResult};
use crate::stream::hub::Hub;
use crate::stream::quota::Quotas;
use convert::{env_to_proto, flag_arg, kind_to_proto, result_to_proto, segment_arg};
use page::{page, page_size};

use crate::usage::Keys;
use watch::PropagationStream;

/// Largest page a list call returns.
const MAX_PAGE: usize = 1_000;

/// The Admin service.
#[derive(Debug, Clone)]
pub(crate) struct AdminService {
    store: Store,
    hub: Arc<Hub>,
    tokens: Arc<Tokens>,
    quotas: Arc<Quotas>,
    started: Instant,
    /// Whether the relay is ready (health SERVING).
    ready: tokio::sync::watch::Receiver<bool>,
    /// Evaluations on data staler than this say `stale`.
    stale_after_ms: u64,
    /// Open propagation watches, against their caps.
    watches: Arc<Watches>,
}

impl AdminService {
    /// A service over `store`, authorizing with `tokens`, writes limited
    /// by `quotas`; `ready` says whether the relay serves; propagation
    /// watches capped by `watches`.
    pub(crate) fn new(
        store: Store,
        hub: Arc<Hub>,
        tokens: Arc<Tokens>,
        quotas: Arc<Quotas>,
        ready: tokio::sync::watch::Receiver<bool>,
        stale_after: Duration,
        watches: Arc<Watches>,
    ) -> AdminService {
        AdminService {
            store,
            hub,
            tokens,
            quotas,
            started: Instant::now(),
            ready,
            stale_after_ms: stale_after.as_millis() as u64,
            watches,
        }
    }
}

/// The token the request was authenticated with (set by `AdminAuth`).
fn principal<T>(req: &Request<T>) -> Result<Principal, Status> {
    req.extensions().get::<Principal>().cloned().ok_or_else(|| {
        Refusal::Unauthenticated("admin token required: send `authorization: Bearer <token>`").into()
    })
}

/// Checks that the caller has `role` on `env` (`None`: all environments)
/// and returns who it is.
fn authorize<T>(req: &Request<T>, role: Role, env: Option<&str>, what: &str) -> Result<Principal, Status> {
    let p = principal(req)?;
    p.require(role, env, what)?;
    Ok(p)
}

/// The audit identity of a write: the principal, and the caller's
/// `x-flagstream-actor` header as an unverified note.
fn who<T>(req: &Request<T>, p: &Principal) -> Who {
    let on_behalf_of = req
        .metadata()
        .get("x-flagstream-actor")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .chars()
        .take(128)
        .collect();
    Who { principal: p.name().to_owned(), on_behalf_of }
}

impl AdminService {
    /// Counts a write refused before it reached the store.
    fn refused(&self, status: Status) -> Status {
        self.store.metrics().admin_writes.get_or_create(&vec![("result", "invalid".to_owned())]).inc();
        status
    }

    async fn write(
        &self,
        env: &str,
        ops: Vec<Op>,
        expected_revision: Option<u64>,
        who: &Who,
        comment: &str,
    ) -> Result<WriteResult, Status> {
        // A replica refuses before any quota is spent.
        self.store.check_writable()?;
        if comment.len() > 1024 {
            self.store.metrics().limit_hit("comment_bytes");
            return Err(self.refused(invalid("comment", format!("{} bytes, limit 1024", comment.len()))));
        }
        // Rate buckets are keyed by environment: only existing ones.
        self.store.env(env)?;
        self.quotas.check_write(env, &who.principal)?;
        Ok(self.store.write(env, ops, expected_revision, who, comment).await?)
    }

    fn flag_now(&self, env: &str, key: &str) -> Result<Option<pb::Flag>, Status> {
        let env = self.store.env(env)?;
        let state = env.state.load();
        Ok(state.snapshot.flag(key).map(|f| wire::flag_to_proto(&f)))
    }

    fn propagation(&self, env: &str, revision: Option<u64>) -> Result<pb::Propagation, Status> {
        let e = self.store.env(env)?;
        let state = e.state.load();
        let revision = revision.unwrap_or(state.revision);
        let p = self.hub.propagation(env, &state.epoch, revision);
        Ok(pb::Propagation {
            environment: env.to_owned(),
            epoch: state.epoch.clone(),
            revision,
            committed_unix_ms: if p.committed_ms > 0 {
                p.committed_ms
            } else {
                state.log.iter().find(|l| l.revision == revision).map_or(0, |l| l.committed_unix_ms)
            },
            subscribers_total: p.subscribers,
            subscribers_acked: p.acked,
            latency_p50_ms: p.p50_ms,
            latency_p99_ms: p.p99_ms,
            latency_max_ms: p.max_ms,
            relays_total: p.relays_total,
            relays_reporting: p.relays_reporting,
        })
    }
}

impl AdminService {
    fn env_status(&self, e: &Env) -> pb::EnvironmentStatus {
        let s = e.state.load();
        let replicas: Vec<pb::ReplicaStatus> = self
            .hub
            .relays(&s.name)
            .iter()
            .map(|r| {
                let applied = r.applied.load(std::sync::atomic::Ordering::Relaxed);
                pb::ReplicaStatus {
                    token: r.key_id.clone(),
                    address: r
                        .conn
                        .as_ref()
                        .and_then(|c| c.remote)
                        .map(|a| a.to_string())
                        .unwrap_or_default(),
                    version: r.sdk.clone(),
                    applied_revision: applied,
                    lag_revisions: s.revision.saturating_sub(applied),
                    subtree_subscribers: r
                        .report
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .as_ref()
                        .map_or(0, |rep| rep.subscribers),
                }
            })
            .collect();
        pb::EnvironmentStatus {
            name: s.name.clone(),
            epoch: s.epoch.clone(),
            head_revision: s.revision,
            checksum: s.checksum(),
            subscribers: self.hub.count(&s.name) as u64,
            relay_subscribers: replicas.len() as u64,
            staleness_ms: self.store.staleness_ms(e),
            replicas,
            upstream_live: e.freshness.is_live(),
        }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn create_environment(
        &self,
        req: Request<pb::CreateEnvironmentRequest>,
    ) -> Result<Response<pb::CreateEnvironmentResponse>, Status> {
        let p = authorize(&req, Role::Admin, None, "create environments")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        let (env, sdk_key) = self.store.create_env(&r.name, &r.description, &by).await?;
        tracing::info!(env = %r.name, by = %p.name(), "environment created");
        Ok(Response::new(pb::CreateEnvironmentResponse { environment: Some(env_to_proto(&env)), sdk_key }))
    }

    async fn list_environments(
        &self,
        req: Request<pb::ListEnvironmentsRequest>,
    ) -> Result<Response<pb::ListEnvironmentsResponse>, Status> {
        // Every role may list; a token scoped to some environments sees only those.
        let p = principal(&req)?;
        let r = req.into_inner();
        let size = page_size(r.page_size);
        let envs: Vec<_> = self
            .store
            .envs()
            .into_iter()
            .filter(|e| {
                let name = &e.meta.load().name;
                *name > r.page_token && p.sees(name)
            })
            .collect();
        let next = if envs.len() > size { envs[size - 1].meta.load().name.clone() } else { String::new() };
        let environments = envs.iter().take(size).map(|e| env_to_proto(e)).collect();
        Ok(Response::new(pb::ListEnvironmentsResponse { environments, next_page_token: next }))
    }

    async fn delete_environment(
        &self,
        req: Request<pb::DeleteEnvironmentRequest>,
    ) -> Result<Response<pb::DeleteEnvironmentResponse>, Status> {
        let p = authorize(&req, Role::Admin, None, "delete environments")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        let audit_archive = self.store.delete_env(&r.name, r.expected_revision, &by).await?;
        tracing::info!(env = %r.name, by = %p.name(), audit_archive = %audit_archive, "environment deleted");
        Ok(Response::new(pb::DeleteEnvironmentResponse { audit_archive }))
    }

    async fn get_flag(
        &self,
        req: Request<pb::GetFlagRequest>,
    ) -> Result<Response<pb::GetFlagResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Read, Some(&env), "read flags")?;
        let r = req.into_inner();
        let env = self.store.env(&r.environment)?;
        let state = env.state.load();
        let flag = state.snapshot.flag(&r.key).ok_or_else(|| {
            Status::from(Refusal::ItemNotFound {
                kind: "flag",
                key: r.key.clone(),
                env: r.environment.clone(),
            })
        })?;
        Ok(Response::new(pb::GetFlagResponse {
            flag: Some(wire::flag_to_proto(&flag)),
            revision: state.revision,
        }))
    }

    async fn list_flags(
        &self,
        req: Request<pb::ListFlagsRequest>,
    ) -> Result<Response<pb::ListFlagsResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Read, Some(&env), "read flags")?;
        let r = req.into_inner();
        let env = self.store.env(&r.environment)?;
        let state = env.state.load();
        let size = page_size(r.page_size);
        // Keys first (the snapshot keeps no models): only the flags the
        // page reaches are decoded.
        let snap = &state.snapshot;
        let mut keys: Vec<&str> =
            snap.keys().filter(|k| k.starts_with(&r.key_prefix) && *k > r.page_token.as_str()).collect();
        keys.sort_unstable();
        let flags = (keys.into_iter().filter_map(|k| snap.flag(k)))
            .filter(|f| r.tag.is_empty() || f.tags.contains(&r.tag))
            .filter(|f| r.on.is_none_or(|on| f.on == on));
        let (flags, next) = page(flags.map(|f| wire::flag_to_proto(&f)), size, |f| f.key.clone());
        Ok(Response::new(pb::ListFlagsResponse { flags, next_page_token: next, revision: state.revision }))
    }

    async fn put_flag(
        &self,
        req: Request<pb::PutFlagRequest>,
    ) -> Result<Response<pb::PutFlagResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write flags")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let flag = flag_arg("flag", r.flag).map_err(|e| self.refused(e))?;
        let key = flag.key.clone();
        let op = Op::PutFlag { flag, expected: r.expected_version };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        let flag = self.flag_now(&r.environment, &key)?;
        Ok(Response::new(pb::PutFlagResponse { result: Some(result_to_proto(&result)), flag }))
    }

    async fn delete_flag(
        &self,
        req: Request<pb::DeleteFlagRequest>,
    ) -> Result<Response<pb::DeleteFlagResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write flags")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let op = Op::DeleteFlag { key: r.key, expected: r.expected_version };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        Ok(Response::new(pb::DeleteFlagResponse { result: Some(result_to_proto(&result)) }))
    }

    async fn patch_flag(
        &self,
        req: Request<pb::PatchFlagRequest>,
    ) -> Result<Response<pb::PatchFlagResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write flags")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let op = Op::PatchFlag { key: r.key.clone(), expected: r.expected_version, patches: r.ops };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        let flag = self.flag_now(&r.environment, &r.key)?;
        Ok(Response::new(pb::PatchFlagResponse { result: Some(result_to_proto(&result)), flag }))
    }

    async fn get_segment(
        &self,
        req: Request<pb::GetSegmentRequest>,
    ) -> Result<Response<pb::GetSegmentResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Read, Some(&env), "read segments")?;
        let r = req.into_inner();
        let env = self.store.env(&r.environment)?;
        let state = env.state.load();
        let seg = state.snapshot.segment(&r.key).ok_or_else(|| {
            Status::from(Refusal::ItemNotFound {
                kind: "segment",
                key: r.key.clone(),
                env: r.environment.clone(),
            })
        })?;
        Ok(Response::new(pb::GetSegmentResponse {
            segment: Some(wire::segment_to_proto(seg)),
            revision: state.revision,
        }))
    }

    async fn list_segments(
        &self,
        req: Request<pb::ListSegmentsRequest>,
    ) -> Result<Response<pb::ListSegmentsResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Read, Some(&env), "read segments")?;
        let r = req.into_inner();
        let env = self.store.env(&r.environment)?;
        let state = env.state.load();
        let size = page_size(r.page_size);
        let mut segs: Vec<&flagstream::Segment> = state
            .snapshot
            .segments()
            .filter(|s| s.key.starts_with(&r.key_prefix) && s.key > r.page_token)
            .collect();
        segs.sort_by(|a, b| a.key.cmp(&b.key));
        let (segments, next) = page(segs.iter().map(|s| wire::segment_to_proto(s)), size, |s| s.key.clone());
        Ok(Response::new(pb::ListSegmentsResponse {
            segments,
            next_page_token: next,
            revision: state.revision,
        }))
    }

    async fn put_segment(
        &self,
        req: Request<pb::PutSegmentRequest>,
    ) -> Result<Response<pb::PutSegmentResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write segments")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let segment = segment_arg("segment", r.segment).map_err(|e| self.refused(e))?;
        let key = segment.key.clone();
        let op = Op::PutSegment { segment, expected: r.expected_version };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        let env = self.store.env(&r.environment)?;
        let segment = env.state.load().snapshot.segment(&key).map(wire::segment_to_proto);
        Ok(Response::new(pb::PutSegmentResponse { result: Some(result_to_proto(&result)), segment }))
    }

    async fn delete_segment(
        &self,
        req: Request<pb::DeleteSegmentRequest>,
    ) -> Result<Response<pb::DeleteSegmentResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write segments")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let op = Op::DeleteSegment { key: r.key, expected: r.expected_version };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        Ok(Response::new(pb::DeleteSegmentResponse { result: Some(result_to_proto(&result)) }))
    }

    async fn patch_segment(
        &self,
        req: Request<pb::PatchSegmentRequest>,
    ) -> Result<Response<pb::PatchSegmentResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write segments")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        let op = Op::PatchSegment { key: r.key, expected: r.expected_version, patches: r.ops };
        let result = self.write(&r.environment, vec![op], None, &actor, &r.comment).await?;
        Ok(Response::new(pb::PatchSegmentResponse { result: Some(result_to_proto(&result)) }))
    }

    async fn batch(&self, req: Request<pb::BatchRequest>) -> Result<Response<pb::BatchResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Write, Some(&env), "write flags and segments")?;
        let actor = who(&req, &p);
        let r = req.into_inner();
        const MAX_OPS: usize = 10_000;
        if r.ops.len() > MAX_OPS {
            self.store.metrics().limit_hit("batch_ops");
            return Err(self.refused(invalid("ops", format!("{} operations, limit {MAX_OPS}", r.ops.len()))));
        }
        let pb::BatchRequest { environment, ops, expected_revision, comment } = r;
        // Converting 10,000 flags is CPU work: not on a runtime worker.
        let ops = tokio::task::spawn_blocking(move || {
            ops.into_iter().enumerate().map(|(i, op)| op_from_proto(i, op)).collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|cause| Refusal::TaskFailed { what: "converting the batch", cause })?
        .map_err(|e| self.refused(e))?;
        let result = self.write(&environment, ops, expected_revision, &actor, &comment).await?;
        Ok(Response::new(pb::BatchResponse { result: Some(result_to_proto(&result)) }))
    }

    async fn list_audit(
        &self,
        req: Request<pb::ListAuditRequest>,
    ) -> Result<Response<pb::ListAuditResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Read, Some(&env), "read the audit log")?;
        // The audit log is the primary's; a replica holds none.
        self.store.check_writable()?;
        self.quotas.check_audit_read(&self.quota_env(&env), p.name())?;
        let r = req.into_inner();
        let kind = match pb::ItemKind::try_from(r.item_kind) {
            Ok(pb::ItemKind::Segment) => Kind::Segment,
            _ => Kind::Flag,
        };
        let before = if r.page_token.is_empty() {
            None
        } else {
            let bad = || invalid("page_token", "not a token from this API");
            let (rev, seq) = r.page_token.split_once('.').ok_or_else(bad)?;
            Some((rev.parse::<u64>().map_err(|_| bad())?, seq.parse::<u32>().map_err(|_| bad())?))
        };
        let limit = if r.limit == 0 { 100 } else { (r.limit as usize).min(MAX_PAGE) };
        let key = (!r.key.is_empty()).then_some((kind, r.key.as_str()));
        let records = self.store.audit(&r.environment, key, limit, before).await?;
        let next = match records.last() {
            Some(((rev, seq), _)) if records.len() == limit => format!("{rev}.{seq}"),
            _ => String::new(),
        };
        let entries = records
            .into_iter()
            .map(|(_, a)| pb::AuditEntry {
                revision: a.revision,
                actor: a.actor,
                time_unix_ms: a.time_unix_ms,
                item_kind: a.kind.map_or(pb::ItemKind::Unspecified, kind_to_proto) as i32,
                key: a.key,
                version_before: a.version_before,
                version_after: a.version_after,
                action: match a.action.as_str() {
                    "create" => pb::AuditAction::Create,
                    "delete" => pb::AuditAction::Delete,
                    "sdk_key.create" => pb::AuditAction::SdkKeyCreate,
                    "sdk_key.rotate" => pb::AuditAction::SdkKeyRotate,
                    "sdk_key.revoke" => pb::AuditAction::SdkKeyRevoke,
                    "environment.create" => pb::AuditAction::EnvironmentCreate,
                    "environment.delete" => pb::AuditAction::EnvironmentDelete,
                    "token.create" => pb::AuditAction::TokenCreate,
                    "token.revoke" => pb::AuditAction::TokenRevoke,
                    "environment.cors" => pb::AuditAction::CorsOriginsSet,
                    _ => pb::AuditAction::Update,
                } as i32,
                comment: a.comment,
                on_behalf_of: a.on_behalf_of,
                hash: a.hash,
                prev_hash: a.prev_hash,
                diff: a.diff,
            })
            .collect();
        Ok(Response::new(pb::ListAuditResponse { entries, next_page_token: next }))
    }

    async fn get_propagation(
        &self,
        req: Request<pb::GetPropagationRequest>,
    ) -> Result<Response<pb::GetPropagationResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Read, Some(&env), "read propagation")?;
        let r = req.into_inner();
        Ok(Response::new(pb::GetPropagationResponse {
            propagation: Some(self.propagation(&r.environment, r.revision)?),
        }))
    }

    type WatchPropagationStream = PropagationStream;

    async fn watch_propagation(
        &self,
        req: Request<pb::WatchPropagationRequest>,
    ) -> Result<Response<PropagationStream>, Status> {
        self.watch_propagation_call(req).await
    }

    async fn evaluate(
        &self,
        req: Request<pb::EvaluateRequest>,
    ) -> Result<Response<pb::EvaluateResponse>, Status> {
        self.evaluate_call(req).await
    }

    async fn get_usage(
        &self,
        req: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        let env_name = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Read, Some(&env_name), "read usage")?;
        let r = req.into_inner();
        let env = self.store.env(&r.environment)?;
        self.quotas.check_usage_read(&self.quota_env(&env_name), p.name())?;
        let state = env.state.load_full();
        let hub = self.hub.clone();
        // A walk of the environment's usage: on the blocking pool, under
        // that environment's lock only.
        let view = tokio::task::spawn_blocking(move || {
            let keys = match r.key.as_str() {
                "" => Keys::Page { after: &r.page_token, size: page_size(r.page_size) },
                key => Keys::One(key),
            };
            hub.usage.view(&r.environment, &state.snapshot, keys)
        })
        .await
        .map_err(|e| Status::internal(format!("reading usage failed: {e}")))?;
        Ok(Response::new(view))
    }

    async fn status(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let p = principal(&req)?;
        let environments = self
            .store
            .envs()
            .iter()
            .filter(|e| p.sees(&e.meta.load().name))
            .map(|e| self.env_status(e))
            .collect();
        // Relay-wide totals and the relay tree only for a token that sees
        // every environment.
        let subscribers_total = if p.all_environments() { self.hub.total() as u64 } else { 0 };
        let (tree, tree_omitted) = if p.all_environments() {
            crate::cluster::tree::whole(&self.store, &self.hub, |_| true)
        } else {
            (Vec::new(), 0)
        };
        let (role, upstream) = match self.store.source() {
            StoreSource::Primary => (pb::RelayRole::Primary, String::new()),
            StoreSource::Replica { upstream } => (pb::RelayRole::Replica, upstream.clone()),
            StoreSource::Shared => (pb::RelayRole::Shared, String::new()),
        };
        Ok(Response::new(pb::StatusResponse {
            role: role as i32,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            ready: *self.ready.borrow() && !self.hub.is_draining(),
            upstream,
            environments,
            subscribers_total,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            primary: self.store.primary().unwrap_or_default(),
            tree,
            tree_omitted,
        }))
    }

    async fn verify_audit(
        &self,
        req: Request<pb::VerifyAuditRequest>,
    ) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        self.verify_audit_call(req).await
    }

    async fn create_sdk_key(
        &self,
        req: Request<pb::CreateSdkKeyRequest>,
    ) -> Result<Response<pb::CreateSdkKeyResponse>, Status> {
        self.create_sdk_key_call(req).await
    }

    async fn list_sdk_keys(
        &self,
        req: Request<pb::ListSdkKeysRequest>,
    ) -> Result<Response<pb::ListSdkKeysResponse>, Status> {
        self.list_sdk_keys_call(req)
    }

    async fn rotate_sdk_key(
        &self,
        req: Request<pb::RotateSdkKeyRequest>,
    ) -> Result<Response<pb::RotateSdkKeyResponse>, Status> {
        self.rotate_sdk_key_call(req).await
    }

    async fn revoke_sdk_key(
        &self,
        req: Request<pb::RevokeSdkKeyRequest>,
    ) -> Result<Response<pb::RevokeSdkKeyResponse>, Status> {
        self.revoke_sdk_key_call(req).await
    }

    async fn set_cors_origins(
        &self,
        req: Request<pb::SetCorsOriginsRequest>,
    ) -> Result<Response<pb::SetCorsOriginsResponse>, Status> {
        self.set_cors_origins_call(req).await
    }

    async fn create_token(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        self.create_token_call(req).await
    }

    async fn list_tokens(
        &self,
        req: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        self.list_tokens_call(req)
    }

    async fn revoke_token(
        &self,
        req: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        self.revoke_token_call(req).await
    }
}
