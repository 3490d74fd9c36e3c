//! The Admin calls that manage access: SDK keys (role admin on the
//! environment), admin tokens (role admin on all environments), and the
//! audit chain check (role read). Keys that stop working end their streams
//! here, right after the change is durable.

use flagstream_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::{AdminService, authorize, who};
use crate::access::{AccessError, Role};
use crate::cluster::catalog::token_to_proto;
use crate::error::Refusal;
use crate::store::SdkKeyRecord;
use crate::store::{Access, Who};

impl AdminService {
    /// Records a token event on the relay's audit chain, after the change
    /// (which stands whatever happens here). A failure is logged and
    /// counted (`limit_hits{limit="audit_record_failed"}`): the change is
    /// done and its log line written, only its chained record is missing.
    async fn chain_token_event(&self, event: Access, token: &str, details: String, by: &Who) {
        let (store, token, by) = (self.store.clone(), token.to_owned(), by.clone());
        // On a task of its own: a caller that goes away does not skip it.
        let done = self
            .store
            .track(async move { store.record_token_event(event, &token, details, &by).await })
            .await;
        let failed = match done {
            Ok(Ok(())) => return,
            // Debug keeps the storage error's cause.
            Ok(Err(e)) => format!("{e:?}"),
            Err(e) => e.to_string(),
        };
        tracing::error!(error = %failed, "recording a token event on the relay's audit chain failed");
        self.store.metrics().limit_hit("audit_record_failed");
    }

    /// The `env` label of an audit read's quota refusal: the environment
    /// (an archive counts under its environment's name), so the label set
    /// stays bounded by the environments.
    pub(super) fn quota_env(&self, env: &str) -> String {
        let name = crate::store::archived_env(env).unwrap_or(env);
        if self.store.env(name).is_ok() { name.to_owned() } else { "*".to_owned() }
    }

    pub(super) async fn verify_audit_call(
        &self,
        req: Request<pb::VerifyAuditRequest>,
    ) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Read, Some(&env), "read the audit log")?;
        // The audit log is the primary's; a replica holds none.
        self.store.check_writable()?;
        self.quotas.check_audit_read(&self.quota_env(&env), p.name())?;
        let v = self.store.verify_audit(&env).await?;
        let (first_broken, problem) = match &v.broken {
            Some(((rev, seq), why)) => {
                tracing::warn!(env = %env, record = %format!("{rev}.{seq}"), problem = %why, "audit chain broken");
                (format!("{rev}.{seq}"), why.clone())
            }
            None => (String::new(), String::new()),
        };
        Ok(Response::new(pb::VerifyAuditResponse {
            records_checked: v.checked,
            ok: v.broken.is_none(),
            first_broken,
            problem,
        }))
    }

    pub(super) async fn create_sdk_key_call(
        &self,
        req: Request<pb::CreateSdkKeyRequest>,
    ) -> Result<Response<pb::CreateSdkKeyResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Admin, Some(&env), "manage SDK keys")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        let (key, secret) = self.store.create_sdk_key(&env, &r.name, r.client, &by).await?;
        tracing::info!(env = %env, key = %key.id, client = key.client, by = %p.name(), "SDK key created");
        Ok(Response::new(pb::CreateSdkKeyResponse { key: Some(key.to_proto()), secret }))
    }

    pub(super) fn list_sdk_keys_call(
        &self,
        req: Request<pb::ListSdkKeysRequest>,
    ) -> Result<Response<pb::ListSdkKeysResponse>, Status> {
        let env = req.get_ref().environment.clone();
        authorize(&req, Role::Admin, Some(&env), "manage SDK keys")?;
        let keys = self.store.sdk_keys(&env)?.iter().map(SdkKeyRecord::to_proto).collect();
        Ok(Response::new(pb::ListSdkKeysResponse { keys }))
    }

    pub(super) async fn rotate_sdk_key_call(
        &self,
        req: Request<pb::RotateSdkKeyRequest>,
    ) -> Result<Response<pb::RotateSdkKeyResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Admin, Some(&env), "manage SDK keys")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        let rotated = self.store.rotate_sdk_key(&env, &r.id, r.grace_ms, &r.name, &by).await?;
        if rotated.old.is_none() {
            self.hub.end_key(&env, &r.id, "was rotated without a grace period");
        }
        tracing::info!(env = %env, old = %r.id, new = %rotated.key.id, grace_ms = r.grace_ms, by = %p.name(), "SDK key rotated");
        Ok(Response::new(pb::RotateSdkKeyResponse {
            old: rotated.old.as_ref().map(SdkKeyRecord::to_proto),
            key: Some(rotated.key.to_proto()),
            secret: rotated.secret,
        }))
    }

    pub(super) async fn revoke_sdk_key_call(
        &self,
        req: Request<pb::RevokeSdkKeyRequest>,
    ) -> Result<Response<pb::RevokeSdkKeyResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Admin, Some(&env), "manage SDK keys")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        self.store.revoke_sdk_key(&env, &r.id, &by).await?;
        let ended = self.hub.end_key(&env, &r.id, "was revoked");
        tracing::info!(env = %env, key = %r.id, streams_ended = ended, by = %p.name(), "SDK key revoked");
        Ok(Response::new(pb::RevokeSdkKeyResponse {}))
    }

    pub(super) async fn set_cors_origins_call(
        &self,
        req: Request<pb::SetCorsOriginsRequest>,
    ) -> Result<Response<pb::SetCorsOriginsResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Admin, Some(&env), "set CORS origins")?;
        let by = who(&req, &p);
        let r = req.into_inner();
        let origins = self.store.set_cors_origins(&env, &r.origins, &by).await?;
        tracing::info!(env = %env, origins = ?origins, by = %p.name(), "CORS origins set");
        Ok(Response::new(pb::SetCorsOriginsResponse { origins }))
    }

    pub(super) async fn create_token_call(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let p = authorize(&req, Role::Admin, None, "manage admin tokens")?;
        let by_who = who(&req, &p);
        let r = req.into_inner();
        let role = match pb::TokenRole::try_from(r.role) {
            Ok(pb::TokenRole::Read) => Role::Read,
            Ok(pb::TokenRole::Write) => Role::Write,
            Ok(pb::TokenRole::Admin) => Role::Admin,
            _ => return Err(crate::error::invalid("role", "must be READ, WRITE or ADMIN")),
        };
        for e in &r.environments {
            self.store.env(e).map_err(|_| {
                crate::error::invalid("environments", format!("no environment {e:?}; create it first"))
            })?;
        }
        // On a task of its own: a caller that goes away cannot leave the
        // token on disk but not in memory.
        // Its audit record on the same task: written even if the caller goes.
        let (this, by, max) = (self.clone(), p.name().to_owned(), self.quotas.max_tokens());
        let created = self
            .store
            .track(async move {
                let created = this.tokens.create(&r.name, role, r.environments, r.replicate, &by, max).await;
                if let Ok((t, _)) = &created {
                    let details = format!(
                        "role: {}\nenvironments: [{}]\nreplicate: {}\n",
                        t.role.name(),
                        t.environments.join(", "),
                        t.replicate
                    );
                    this.chain_token_event(Access::TokenCreate, &t.name, details, &by_who).await;
                }
                created
            })
            .await
            .map_err(|cause| Refusal::TaskFailed { what: "creating the token", cause })?;
        let (t, secret) = match created {
            Err(AccessError::Quota { used, limit }) => {
                let msg = format!(
                    "a new token would make {used} admin tokens, the limit is {limit} (quota-tokens); revoke one first"
                );
                return Err(self.quotas.refuse("*", "tokens", msg, None));
            }
            other => other?,
        };
        tracing::info!(token = %t.name, role = t.role.name(), environments = ?t.environments, by = %p.name(), "admin token created");
        Ok(Response::new(pb::CreateTokenResponse { token: Some(token_to_proto(&t)), secret }))
    }

    pub(super) fn list_tokens_call(
        &self,
        req: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        authorize(&req, Role::Admin, None, "manage admin tokens")?;
        let tokens = self.tokens.list().iter().map(|t| token_to_proto(t)).collect();
        Ok(Response::new(pb::ListTokensResponse { tokens }))
    }

    pub(super) async fn revoke_token_call(
        &self,
        req: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let p = authorize(&req, Role::Admin, None, "manage admin tokens")?;
        let by_who = who(&req, &p);
        let r = req.into_inner();
        // The revocation, the end of the streams following with the token
        // and its audit record on one task: a caller that goes away cannot
        // leave a revoked token's streams open or its record unwritten.
        let (this, name, by) = (self.clone(), r.name.clone(), p.name().to_owned());
        self.store.track(async move {
            let revoked = this.tokens.revoke(&name).await;
            // Gone from the store, whoever revoked it (another relay of a
            // shared database may have been first): its replica streams
            // here stop at once.
            if matches!(revoked, Ok(()) | Err(AccessError::NotFound(_))) {
                let ended = this.hub.end_token(&name);
                tracing::info!(token = %name, by = %by, replica_streams_ended = ended, revoked_here = revoked.is_ok(), "admin token revoked");
            }
            if revoked.is_ok() {
                this.chain_token_event(Access::TokenRevoke, &name, String::new(), &by_who).await;
            }
            revoked
        })
        .await
        .map_err(|cause| Refusal::TaskFailed { what: "revoking the token", cause })??;
        Ok(Response::new(pb::RevokeTokenResponse {}))
    }
}
