//! `--wait`: follows a revision's propagation to every subscriber and
//! replica (the Admin API's WatchPropagation), printing progress.

use std::time::Duration;

use flagstream_proto::v1 as pb;

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit};

/// Waits for propagation of `revision` (for `--wait`), printing progress.
pub(crate) async fn wait_propagation(conn: &mut Conn, revision: u64, timeout: Duration) -> CmdResult {
    let req = pb::WatchPropagationRequest {
        environment: conn.env.clone(),
        revision: Some(revision),
        min_interval_ms: 200,
    };
    let mut stream = conn.admin.watch_propagation(req).await?.into_inner();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_) => break,
            Ok(Err(s)) => return Err(s.into()),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(m))) => {
                if let Some(p) = m.propagation {
                    let relays = if p.relays_total > 0 {
                        format!(" ({} of {} replicas reporting)", p.relays_reporting, p.relays_total)
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "revision {}: {} of {} subscribers{relays}",
                        p.revision, p.subscribers_acked, p.subscribers_total
                    );
                    // Done once every subscriber counted acked and every
                    // replica reported (else the count is incomplete).
                    let done =
                        p.subscribers_acked >= p.subscribers_total && p.relays_reporting >= p.relays_total;
                    last = Some(p);
                    if done {
                        break;
                    }
                }
            }
        }
    }
    let p =
        last.ok_or_else(|| Failure::new(exit::INCOMPLETE, "no propagation information before the timeout"))?;
    let summary = format!(
        "revision {} reached {} of {} subscribers in {} ms (p99){}",
        p.revision,
        p.subscribers_acked,
        p.subscribers_total,
        p.latency_p99_ms,
        if p.relays_total > 0 {
            format!(", {} of {} replicas reporting", p.relays_reporting, p.relays_total)
        } else {
            String::new()
        }
    );
    println!("{summary}");
    if p.subscribers_acked < p.subscribers_total || p.relays_reporting < p.relays_total {
        return Err(Failure::new(
            exit::INCOMPLETE,
            format!("propagation incomplete after {timeout:?}: {summary}"),
        ));
    }
    Ok(())
}
