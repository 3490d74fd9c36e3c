//! An environment's metadata as stored: name, epoch, head revision and
//! checksum, SDK keys (their secrets only as hashes), the audit chain's
//! head. Every backend stores it as this JSON document.

use serde::{Deserialize, Serialize};

/// Persistent facts about one environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct EnvMeta {
    /// Name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Store epoch: random, made at creation, kept across restarts.
    pub epoch: String,
    /// Head revision.
    pub revision: u64,
    /// Checksum at head, to verify the items on load.
    pub checksum: u64,
    /// Commit time of the head revision.
    pub committed_unix_ms: u64,
    /// Creation time.
    pub created_unix_ms: u64,
    /// SHA-256 (hex) of the SDK key, before environments had several keys
    /// (migrated into `sdk_keys` on load).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sdk_key_hash: String,
    /// The environment's SDK keys.
    #[serde(default)]
    pub sdk_keys: Vec<SdkKeyRecord>,
    /// Number of SDK keys ever made (ids `k1`, `k2`, ...; never reused).
    #[serde(default)]
    pub keys_made: u64,
    /// Hash of the newest audit record: the chain must end here.
    #[serde(default)]
    pub audit_head: String,
    /// On a replica: when its upstream last confirmed this data current,
    /// Unix ms (its staleness after a restart counts from here); 0 on a
    /// primary.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub confirmed_unix_ms: u64,
    /// Web origins (`https://app.example.com`) whose pages may call OFREP
    /// with this environment's keys (CORS); empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors_origins: Vec<String>,
}

impl EnvMeta {
    /// Moves a pre-multi-key `sdk_key_hash` into `sdk_keys` as `k1`.
    pub(crate) fn migrate_keys(&mut self) {
        if self.sdk_keys.is_empty() && !self.sdk_key_hash.is_empty() {
            self.sdk_keys.push(SdkKeyRecord {
                id: "k1".into(),
                name: "default".into(),
                hash: std::mem::take(&mut self.sdk_key_hash),
                created_unix_ms: self.created_unix_ms,
                expires_unix_ms: 0,
                created_by: "relay".into(),
                client: false,
            });
            self.keys_made = self.keys_made.max(1);
        }
    }
}

/// One SDK key of an environment; the secret only as its hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SdkKeyRecord {
    /// `k1`, `k2`, ...
    pub id: String,
    /// Free text.
    pub name: String,
    /// SHA-256 (hex) of the secret.
    pub hash: String,
    /// Creation time, Unix ms.
    pub created_unix_ms: u64,
    /// When it stops working, Unix ms; 0: never.
    pub expires_unix_ms: u64,
    /// The admin token that made it.
    pub created_by: String,
    /// A client-side key (browsers, apps): OFREP only, flags visible to
    /// clients only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub client: bool,
}

impl SdkKeyRecord {
    /// The key as the Admin API and the replication catalog show it (the
    /// secret never: only its hash travels, in the catalog's own field).
    pub(crate) fn to_proto(&self) -> flagstream_proto::v1::SdkKey {
        flagstream_proto::v1::SdkKey {
            id: self.id.clone(),
            name: self.name.clone(),
            created_unix_ms: self.created_unix_ms,
            expires_unix_ms: self.expires_unix_ms,
            created_by: self.created_by.clone(),
            client: self.client,
        }
    }
}

impl SdkKeyRecord {
    /// Whether it works at `now` (Unix ms).
    pub(crate) fn valid_at(&self, now: u64) -> bool {
        self.expires_unix_ms == 0 || now < self.expires_unix_ms
    }
}

fn is_false(v: &bool) -> bool {
    !*v
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
