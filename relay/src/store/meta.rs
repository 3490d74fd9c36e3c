//! An environment's metadata as stored: name, epoch, head revision and
//! checksum, SDK keys (their secrets only as hashes), CORS origins, the
//! audit chain's head. Every backend stores it as this JSON document.
//!
//! Client-side keys are stored apart from the server-side ones (the
//! document's `client_keys`, merged into [`EnvMeta::sdk_keys`] when read):
//! a relay from before client-side keys, reading a shared database, does
//! not see them at all, instead of taking a public key for a server-side
//! one. (It drops them if it rewrites the metadata: upgrade every relay of
//! a database before making client-side keys; docs/OPERATIONS.md.)

use serde::{Deserialize, Serialize};

/// Persistent facts about one environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(from = "Stored", into = "Stored")]
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

/// [`EnvMeta`] as the JSON document holds it: the client-side keys in a
/// field of their own.
#[derive(Serialize, Deserialize)]
struct Stored {
    name: String,
    description: String,
    epoch: String,
    revision: u64,
    checksum: u64,
    committed_unix_ms: u64,
    created_unix_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    sdk_key_hash: String,
    /// The server-side keys.
    #[serde(default)]
    sdk_keys: Vec<SdkKeyRecord>,
    /// The client-side keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    client_keys: Vec<SdkKeyRecord>,
    #[serde(default)]
    keys_made: u64,
    #[serde(default)]
    audit_head: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    confirmed_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cors_origins: Vec<String>,
}

impl From<Stored> for EnvMeta {
    fn from(s: Stored) -> EnvMeta {
        let mut sdk_keys = s.sdk_keys;
        // A record in `client_keys` is a client-side key whatever it says.
        sdk_keys.extend(s.client_keys.into_iter().map(|k| SdkKeyRecord { client: true, ..k }));
        EnvMeta {
            name: s.name,
            description: s.description,
            epoch: s.epoch,
            revision: s.revision,
            checksum: s.checksum,
            committed_unix_ms: s.committed_unix_ms,
            created_unix_ms: s.created_unix_ms,
            sdk_key_hash: s.sdk_key_hash,
            sdk_keys,
            keys_made: s.keys_made,
            audit_head: s.audit_head,
            confirmed_unix_ms: s.confirmed_unix_ms,
            cors_origins: s.cors_origins,
        }
    }
}

impl From<EnvMeta> for Stored {
    fn from(m: EnvMeta) -> Stored {
        let (client_keys, sdk_keys) = m.sdk_keys.into_iter().partition(|k| k.client);
        Stored {
            name: m.name,
            description: m.description,
            epoch: m.epoch,
            revision: m.revision,
            checksum: m.checksum,
            committed_unix_ms: m.committed_unix_ms,
            created_unix_ms: m.created_unix_ms,
            sdk_key_hash: m.sdk_key_hash,
            sdk_keys,
            client_keys,
            keys_made: m.keys_made,
            audit_head: m.audit_head,
            confirmed_unix_ms: m.confirmed_unix_ms,
            cors_origins: m.cors_origins,
        }
    }
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

#[cfg(test)]
impl EnvMeta {
    /// An environment's record with nothing but its name, epoch and head
    /// revision set (tests of the layers below the store).
    pub(crate) fn for_tests(name: &str, epoch: &str, revision: u64) -> EnvMeta {
        EnvMeta {
            name: name.into(),
            description: String::new(),
            epoch: epoch.into(),
            revision,
            checksum: 0,
            committed_unix_ms: 0,
            created_unix_ms: 0,
            sdk_key_hash: String::new(),
            sdk_keys: Vec::new(),
            keys_made: 0,
            audit_head: String::new(),
            confirmed_unix_ms: 0,
            cors_origins: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, client: bool) -> SdkKeyRecord {
        SdkKeyRecord {
            id: id.into(),
            name: String::new(),
            hash: format!("hash-{id}"),
            created_unix_ms: 1,
            expires_unix_ms: 0,
            created_by: "t".into(),
            client,
        }
    }

    /// An older relay reads `sdk_keys` only: client-side keys are not there.
    #[test]
    fn client_keys_are_stored_apart() {
        let meta = EnvMeta {
            sdk_keys: vec![key("k1", false), key("k2", true)],
            keys_made: 2,
            cors_origins: vec!["https://a.example".into()],
            ..EnvMeta::for_tests("e", "ep", 3)
        };
        let doc = serde_json::to_value(&meta).unwrap();
        let ids = |field: &str| -> Vec<String> {
            doc[field].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_owned()).collect()
        };
        assert_eq!(ids("sdk_keys"), ["k1"]);
        assert_eq!(ids("client_keys"), ["k2"]);
        assert_eq!(serde_json::from_value::<EnvMeta>(doc).unwrap(), meta);
    }
}
