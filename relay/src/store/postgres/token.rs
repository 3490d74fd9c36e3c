//! Revoking an admin token on a shared database: the last-admin check and
//! the removal in one transaction, under row locks every relay's
//! revocation takes, so two relays revoking the last two admin tokens at
//! once cannot both succeed.

use super::{CHANNEL, PostgresBackend, db};
use crate::store::backend::Revoked;
use crate::store::token::TokenRecord;
use crate::store::{StoreError, corrupt};

/// Removes token `name` unless it is the last admin token for all
/// environments, as one transaction.
///
/// Every token row is locked (`FOR UPDATE`, in name order, so concurrent
/// revocations queue without deadlocking); a revocation that waited reads
/// the rows as they are after the one before it committed (under READ
/// COMMITTED a locked row deleted meanwhile is skipped), so it counts only
/// admin tokens that still exist and that nobody can remove before it
/// commits. A token created meanwhile is not counted: that only makes the
/// check stricter.
pub(super) async fn revoke(b: &PostgresBackend, name: &str) -> Result<Revoked, StoreError> {
    let mut c = b.client().await?;
    let tx = c.transaction().await.map_err(db)?;
    let rows = tx
        .query("SELECT name, record FROM flagstream_tokens ORDER BY name FOR UPDATE", &[])
        .await
        .map_err(db)?;
    let all = rows
        .iter()
        .map(|r| {
            let n: String = r.get(0);
            serde_json::from_value::<TokenRecord>(r.get(1)).map_err(|e| corrupt(format!("token {n:?}"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let decision = crate::store::token::revocation(&all, name);
    if decision == Revoked::Done {
        tx.execute("DELETE FROM flagstream_tokens WHERE name = $1", &[&name]).await.map_err(db)?;
        tx.execute("SELECT pg_notify($1, 'tokens')", &[&CHANNEL]).await.map_err(db)?;
    }
    tx.commit().await.map_err(db)?;
    Ok(decision)
}
