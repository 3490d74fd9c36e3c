//! SDK keys by the hash of their secret: how a Hello finds its
//! environment in one map lookup, however many environments and keys the
//! relay holds (an unknown key, as a key-guessing flood sends, costs the
//! same O(1) as a known one).
//!
//! The index is rebuilt lazily: every change to environments or their keys
//! bumps the store's catalog version ([`Store::catalog_changed`]), and the
//! first lookup that sees a newer version rebuilds the map (one rebuild at
//! a time: concurrent lookups wait for it, a short lock held only while
//! the map is built, once per catalog change). A map is never replaced by
//! one built at an older version. A found entry is
//! checked against the environment's current metadata (the key still
//! there, same hash, valid now), so a stale map can never admit a revoked
//! or expired key.
//!
//! Timing: the map is keyed by SHA-256 digests of the presented secret. A
//! lookup's time depends on the digest, which a caller cannot steer toward
//! a stored key's digest without a preimage, so it tells nothing about the
//! stored keys (the scan it replaces compared every key in constant time
//! for the same reason, at O(keys) per Hello).
//!
//! [`Store::catalog_changed`]: super::Store::catalog_changed

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::Env;

/// The index at one catalog version.
#[derive(Debug, Default)]
struct Built {
    /// The catalog version it was built at (`None`: never built).
    version: Option<u64>,
    /// Secret hash → (environment name, key id).
    by_hash: HashMap<String, (String, String)>,
}

/// A key found by its hash.
#[derive(Debug, Clone)]
pub(crate) struct KeyMatch {
    /// Its environment.
    pub env: Arc<Env>,
    /// Its id (`k1`, ...).
    pub id: String,
    /// A client-side key (OFREP only, flags visible to clients only).
    pub client: bool,
}

/// SDK key hash → environment and key id.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    built: ArcSwap<Built>,
    /// Serialises rebuilds.
    rebuilding: Mutex<()>,
}

impl KeyIndex {
    /// The environment and key id whose secret hashes to `hash` and that
    /// works at `now_ms`. `version` is the store's current catalog
    /// version, `envs` its environments.
    pub(crate) fn find(
        &self,
        hash: &str,
        now_ms: u64,
        version: u64,
        envs: &HashMap<String, Arc<Env>>,
    ) -> Option<KeyMatch> {
        let mut built = self.built.load_full();
        if built.version < Some(version) {
            let _one = self.rebuilding.lock().unwrap_or_else(|p| p.into_inner());
            built = self.built.load_full();
            if built.version < Some(version) {
                built = Arc::new(build(version, envs));
                self.built.store(built.clone());
            }
        }
        let (env_name, key_id) = built.by_hash.get(hash)?;
        let env = envs.get(env_name)?;
        let meta = env.meta.load();
        let key = meta.sdk_keys.iter().find(|k| k.id == *key_id && k.hash == hash && k.valid_at(now_ms))?;
        Some(KeyMatch { env: env.clone(), id: key_id.clone(), client: key.client })
    }
}

fn build(version: u64, envs: &HashMap<String, Arc<Env>>) -> Built {
    let mut by_hash = HashMap::new();
    for (name, env) in envs {
        for k in &env.meta.load().sdk_keys {
            by_hash.insert(k.hash.clone(), (name.clone(), k.id.clone()));
        }
    }
    Built { version: Some(version), by_hash }
}
