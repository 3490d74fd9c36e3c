//! `flagstream.v1.Replication` on the wire: the catalog long poll replica
//! relays follow (`catalog.rs` builds and waits; this translates). Served on
//! the SDK-facing address beside Sync, so a replica reaches everything it
//! needs at one URL even when the Admin API is fenced off elsewhere.

use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::replication_server::Replication;
use tonic::{Request, Response, Status};

use crate::access::{Principal, Tokens};
use crate::error::Refusal;
use crate::store::Store;

/// The Replication service.
#[derive(Debug, Clone)]
pub(crate) struct ReplicationService {
    store: Store,
    tokens: Arc<Tokens>,
}

impl ReplicationService {
    /// A service over `store` and `tokens` (authenticated by `AdminAuth`).
    pub(crate) fn new(store: Store, tokens: Arc<Tokens>) -> ReplicationService {
        ReplicationService { store, tokens }
    }
}

#[tonic::async_trait]
impl Replication for ReplicationService {
    async fn get_catalog(
        &self,
        req: Request<pb::GetCatalogRequest>,
    ) -> Result<Response<pb::Catalog>, Status> {
        let p = req.extensions().get::<Principal>().cloned().ok_or_else(|| {
            Status::from(Refusal::Unauthenticated("token required: send `authorization: Bearer <token>`"))
        })?;
        if !p.0.replicate {
            return Err(Refusal::NotPermitted(format!(
                "token {:?} may not read the catalog: that needs the replicate scope",
                p.name()
            ))
            .into());
        }
        let r = req.into_inner();
        let wait = Duration::from_millis(u64::from(r.wait_ms));
        Ok(Response::new(
            crate::cluster::catalog::wait(&self.store, &self.tokens, &r.known_version, wait, r.client_keys)
                .await,
        ))
    }
}
