//! `--noisy`: the noisy neighbour (another environment's flood).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::relay::{Relay, Token, bool_flag, put};
use tokio::sync::watch;

/// The relay's write quota per environment in this mode, per second.
pub(super) const WRITE_QUOTA: &str = "20";
/// Its new-subscription quota per environment, per second.
pub(super) const SUBSCRIBE_QUOTA: &str = "50";

/// Creates the noisy tenant: environment `noisy` and a write token
/// scoped to it. Returns (token secret, SDK key).
pub(super) async fn setup(admin: &mut flagstream_tests::relay::Admin) -> anyhow::Result<(String, String)> {
    let env = pb::CreateEnvironmentRequest { name: "noisy".into(), description: String::new() };
    let key = admin.create_environment(env).await?.into_inner().sdk_key;
    let token = pb::CreateTokenRequest {
        name: "noisy-tenant".into(),
        role: pb::TokenRole::Write as i32,
        environments: vec!["noisy".into()],
        replicate: false,
    };
    Ok((admin.create_token(token).await?.into_inner().secret, key))
}

#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    writes_refused: AtomicU64,
    subscribes: AtomicU64,
    subscribes_refused: AtomicU64,
    other_errors: AtomicU64,
}

/// Floods at 10× the quotas until stopped.
pub(super) struct Flood {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counts: Arc<Counts>,
    started: std::time::Instant,
}

fn per_sec(quota: &str) -> f64 {
    quota.parse::<f64>().unwrap_or(1.0) * 10.0
}

impl Flood {
    pub(super) async fn start(relay: &Relay, token: &str, key: &str) -> Flood {
        let (stop, stopped) = watch::channel(false);
        let counts = Arc::new(Counts::default());
        let channel = relay.channel().await;
        let mut admin = AdminClient::with_interceptor(channel.clone(), Token(token.to_owned()));
        let (c, mut s) = (counts.clone(), stopped.clone());
        let writes = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec(WRITE_QUOTA)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            for i in 0u64.. {
                tokio::select! {
                    _ = s.changed() => return,
                    _ = tick.tick() => {}
                }
                c.writes.fetch_add(1, Ordering::Relaxed);
                match put(&mut admin, "noisy", bool_flag(&format!("n{}", i % 100), i % 2 == 0)).await {
                    Ok(_) => {}
                    Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                        c.writes_refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        c.other_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let (c, mut s, key) = (counts.clone(), stopped, key.to_owned());
        let subscribes = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec(SUBSCRIBE_QUOTA)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = s.changed() => return,
                    _ = tick.tick() => {}
                }
                c.subscribes.fetch_add(1, Ordering::Relaxed);
                let (mut client, c, key) = (SyncClient::new(channel.clone()), c.clone(), key.clone());
                // Each attempt opens a stream, reads its first message
                // (or the refusal) and hangs up: a reconnect storm.
                tokio::spawn(async move {
                    let hello = pb::Hello { sdk_key: key, sdk_name: "noisy".into(), ..Default::default() };
                    let first =
                        pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) };
                    let outcome = match client.subscribe(tokio_stream::iter([first])).await {
                        Ok(r) => r.into_inner().message().await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    match outcome {
                        Ok(()) => {}
                        Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                            c.subscribes_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            c.other_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        Flood { stop, tasks: vec![writes, subscribes], counts, started: std::time::Instant::now() }
    }

    pub(super) async fn stop(self) -> anyhow::Result<String> {
        // The tasks check between attempts; a send error means they ended.
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.await?;
        }
        let secs = self.started.elapsed().as_secs_f64();
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Ok(format!(
            "noisy neighbour             {:.0} write attempts/s ({} of {} refused by quota-writes-per-sec {WRITE_QUOTA}/s), {:.0} subscription attempts/s ({} of {} refused by quota-subscribes-per-sec {SUBSCRIBE_QUOTA}/s), {} other errors",
            get(&c.writes) as f64 / secs,
            get(&c.writes_refused),
            get(&c.writes),
            get(&c.subscribes) as f64 / secs,
            get(&c.subscribes_refused),
            get(&c.subscribes),
            get(&c.other_errors)
        ))
    }
}
