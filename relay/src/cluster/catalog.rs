//! The catalog: what a replica relay needs besides the flags to serve on
//! its own (the environments, their SDK keys, the admin tokens; secrets
//! only as hashes, PROTOCOL.md §7 "Replication"). Built from the store and
//! the token registry for `Replication.GetCatalog`, long-polled, and applied by
//! a replica to its own store. Knows nothing of the network.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use prost::Message;
use sha2::{Digest, Sha256};

use crate::access::{AccessError, Role, TokenRecord, Tokens};
use crate::store::{EnvMeta, SdkKeyRecord, Store, StoreError, now_ms};
use crate::stream::hub::Hub;

/// The longest a GetCatalog call is held.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(30);

/// Why a catalog could not be applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CatalogError {
    /// The store failed.
    #[error("applying the catalog to the store")]
    Store(#[from] StoreError),
    /// The token registry failed.
    #[error("applying the catalog's tokens")]
    Tokens(#[from] AccessError),
    /// A record in the catalog is unusable.
    #[error("catalog: {0}")]
    Invalid(String),
}

fn key_to_proto(k: &SdkKeyRecord) -> pb::CatalogSdkKey {
    pb::CatalogSdkKey { key: Some(k.to_proto()), secret_sha256: k.hash.clone() }
}

/// The token's role on the wire.
pub(crate) fn role_to_proto(r: Role) -> pb::TokenRole {
    match r {
        Role::Read => pb::TokenRole::Read,
        Role::Write => pb::TokenRole::Write,
        Role::Admin => pb::TokenRole::Admin,
    }
}

/// The token without its secret, as the Admin API shows it.
pub(crate) fn token_to_proto(t: &TokenRecord) -> pb::Token {
    pb::Token {
        name: t.name.clone(),
        role: role_to_proto(t.role) as i32,
        environments: t.environments.clone(),
        replicate: t.replicate,
        created_unix_ms: t.created_unix_ms,
        created_by: t.created_by.clone(),
    }
}

/// The current catalog, its version filled in; without client-side keys
/// unless the caller knows them (`client_keys`: a relay from before them
/// would serve one as a server-side key, every flag and Subscribe).
pub(crate) fn build(store: &Store, tokens: &Tokens, client_keys: bool) -> pb::Catalog {
    let now = now_ms();
    let environments = store
        .envs()
        .iter()
        .map(|env| {
            let meta = env.meta.load();
            pb::CatalogEnvironment {
                name: meta.name.clone(),
                description: meta.description.clone(),
                created_unix_ms: meta.created_unix_ms,
                sdk_keys: meta
                    .sdk_keys
                    .iter()
                    .filter(|k| k.valid_at(now) && (client_keys || !k.client))
                    .map(key_to_proto)
                    .collect(),
                cors_origins: meta.cors_origins.clone(),
            }
        })
        .collect();
    let tokens = tokens
        .list()
        .iter()
        .map(|t| pb::CatalogToken { token: Some(token_to_proto(t)), secret_sha256: t.hash.clone() })
        .collect();
    let mut c = pb::Catalog {
        version: String::new(),
        unchanged: false,
        environments,
        tokens,
        primary: store.primary().unwrap_or_default(),
    };
    c.version = hex::encode(&Sha256::digest(c.encode_to_vec())[..12]);
    c
}

/// The catalog once it differs from `known`, or `unchanged` after `wait`.
pub(crate) async fn wait(
    store: &Store,
    tokens: &Tokens,
    known: &str,
    wait: Duration,
    client_keys: bool,
) -> pb::Catalog {
    let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
    let (mut envs, mut toks) = (store.catalog_changes(), tokens.changes());
    // A key's expiry changes the catalog without any event: look again
    // every second.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let c = build(store, tokens, client_keys);
        if c.version != known {
            return c;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                return pb::Catalog { version: c.version, unchanged: true, ..pb::Catalog::default() };
            }
            r = envs.changed() => if r.is_err() { return c },
            r = toks.changed() => if r.is_err() { return c },
            _ = tick.tick() => {}
        }
    }
}

fn key_from_proto(k: &pb::CatalogSdkKey) -> Result<SdkKeyRecord, CatalogError> {
    let key = k.key.as_ref().ok_or_else(|| CatalogError::Invalid("an SDK key without its key".into()))?;
    Ok(SdkKeyRecord {
        id: key.id.clone(),
        name: key.name.clone(),
        hash: k.secret_sha256.clone(),
        created_unix_ms: key.created_unix_ms,
        expires_unix_ms: key.expires_unix_ms,
        created_by: key.created_by.clone(),
        client: key.client,
    })
}

fn token_from_proto(t: &pb::CatalogToken) -> Result<TokenRecord, CatalogError> {
    let tok = t.token.as_ref().ok_or_else(|| CatalogError::Invalid("a token without its token".into()))?;
    let role = match pb::TokenRole::try_from(tok.role) {
        Ok(pb::TokenRole::Read) => Role::Read,
        Ok(pb::TokenRole::Write) => Role::Write,
        Ok(pb::TokenRole::Admin) => Role::Admin,
        _ => return Err(CatalogError::Invalid(format!("token {:?}: unknown role {}", tok.name, tok.role))),
    };
    Ok(TokenRecord {
        name: tok.name.clone(),
        role,
        environments: tok.environments.clone(),
        replicate: tok.replicate,
        hash: t.secret_sha256.clone(),
        created_unix_ms: tok.created_unix_ms,
        created_by: tok.created_by.clone(),
    })
}

/// What applying a catalog changed.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Environments created here.
    pub created: Vec<String>,
    /// Environments deleted here.
    pub deleted: Vec<String>,
}

/// Makes a replica's store and tokens match `catalog`: creates and deletes
/// environments (only those in `chosen`, when it is not empty), replaces
/// their SDK keys and the tokens, and ends the streams of keys and tokens
/// that are gone.
pub(crate) async fn apply(
    store: &Store,
    tokens: &Tokens,
    hub: &Arc<Hub>,
    catalog: &pb::Catalog,
    chosen: &[String],
) -> Result<Applied, CatalogError> {
    let wanted = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    let mut applied = Applied::default();
    let listed: BTreeMap<&str, &pb::CatalogEnvironment> =
        catalog.environments.iter().filter(|e| wanted(&e.name)).map(|e| (e.name.as_str(), e)).collect();
    for env in store.envs() {
        let name = env.meta.load().name.clone();
        if !listed.contains_key(name.as_str()) {
            store.remove_env(&name, None).await?;
            tracing::info!(env = %name, "environment deleted upstream: removed here");
            applied.deleted.push(name);
        }
    }
    for (name, e) in listed {
        let keys = e.sdk_keys.iter().map(key_from_proto).collect::<Result<Vec<_>, _>>()?;
        if store.env(name).is_err() {
            store
                .add_env(EnvMeta {
                    name: name.to_owned(),
                    description: e.description.clone(),
                    epoch: String::new(),
                    revision: 0,
                    checksum: 0,
                    committed_unix_ms: 0,
                    created_unix_ms: e.created_unix_ms,
                    sdk_key_hash: String::new(),
                    sdk_keys: keys,
                    keys_made: 0,
                    audit_head: String::new(),
                    confirmed_unix_ms: 0,
                    cors_origins: e.cors_origins.clone(),
                })
                .await?;
            tracing::info!(env = %name, "environment created upstream: following it");
            applied.created.push(name.to_owned());
            continue;
        }
        let gone = store.replace_keys(name, e.description.clone(), keys, e.cors_origins.clone()).await?;
        for id in gone {
            hub.end_key(name, &id, "was revoked or expired upstream");
        }
    }
    let records = catalog.tokens.iter().map(token_from_proto).collect::<Result<Vec<_>, _>>()?;
    for gone in tokens.replace_all(records).await? {
        hub.end_token(&gone);
    }
    store.set_primary((!catalog.primary.is_empty()).then(|| catalog.primary.clone()));
    Ok(applied)
}
