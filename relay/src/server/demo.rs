//! The demo environment seeded on first start, so the README's first
//! command shows real flags: a rollout, a rule, a segment, several types.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use flagstream::{Client, Context, FlagSet};
use flagstream_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use crate::store::{Op, Store, StoreError, Who};

/// The demo flags and segment, in the export file format.
pub(crate) const DEMO: &str = r#"
segments:
  - key: beta-testers
    description: People who asked for early features
    included: [user-1, user-2, user-3]
    rules:
      - id: staff
        clauses: [{attribute: email, op: ends_with, values: ["@example.com"]}]
flags:
  - key: new-checkout
    description: The redesigned checkout flow
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: us-enterprise
        clauses:
          - {attribute: country, op: in, values: [US, CA]}
          - {attribute: plan, op: in, values: [enterprise]}
        serve: {variation: 0}
    fallthrough: {rollout: {variations: [{variation: 0, weight: 10000}, {variation: 1, weight: 90000}]}}
    tags: [checkout]
  - key: theme
    description: Default UI theme
    type: string
    variations: [light, dark, system]
    on: true
    off_variation: 0
    targets: [{variation: 1, values: [user-42]}]
    fallthrough: {variation: 2}
    client_visible: true
  - key: beta-banner
    description: Show the beta banner to beta testers
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - id: beta
        clauses: [{attribute: key, op: segment_match, values: [beta-testers]}]
        serve: {variation: 0}
    fallthrough: {variation: 1}
    client_visible: true
  - key: max-upload-mb
    type: int
    variations: [10, 100]
    on: true
    off_variation: 0
    rules:
      - id: paid
        clauses: [{attribute: plan, op: in, values: [pro, enterprise]}]
        serve: {variation: 1}
    fallthrough: {variation: 0}
    client_visible: true
  - key: search-ranking
    type: json
    variations: [{"model": "bm25"}, {"model": "hybrid", "weight": 0.3}]
    on: false
    off_variation: 0
    fallthrough: {variation: 1}
"#;

/// Creates the `demo` environment with the demo flags; returns its SDK key.
pub(crate) async fn seed(store: &Store) -> Result<String, StoreError> {
    let (_, key) = store
        .create_env("demo", "Demo environment seeded on first start", &crate::store::Who::relay("relay"))
        .await?;
    let set: FlagSet = serde_yaml_ng::from_str(DEMO)
        .map_err(|e| StoreError::Corrupt { what: "built-in demo flags".into(), source: Box::new(e) })?;
    let ops = set
        .segments
        .into_iter()
        .map(|segment| Op::PutSegment { segment, expected: Some(0) })
        .chain(set.flags.into_iter().map(|flag| Op::PutFlag { flag, expected: Some(0) }))
        .collect();
    store.write("demo", ops, None, &Who::relay("relay"), "demo seed").await?;
    Ok(key)
}

/// The live demo: an SDK client (the same one services link) subscribed to
/// this relay prints the demo flags whenever they change, while a writer
/// moves the `new-checkout` rollout and toggles `beta-banner` every
/// `period`. Runs until `stop`.
pub(crate) async fn live(
    store: Store,
    grpc: SocketAddr,
    key_file: PathBuf,
    period: Duration,
    stop: CancellationToken,
) {
    let key = match std::fs::read_to_string(&key_file) {
        Ok(k) => k.trim().to_owned(),
        Err(e) => {
            tracing::warn!(error = %e, file = %key_file.display(), "demo: no demo SDK key (start with a fresh data directory)");
            return;
        }
    };
    let client = match Client::builder().endpoints([format!("http://{grpc}")]).sdk_key(key).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "demo: cannot start the SDK client");
            return;
        }
    };
    let mut changes = client.changes();
    let show = |client: &Client| {
        let users: Vec<Context<'static>> = (1..=20).map(|i| Context::new(format!("user-{i}"))).collect();
        let rolled = users.iter().filter(|c| client.bool("new-checkout", c, false)).count();
        let banner = client.bool("beta-banner", &Context::new("user-1"), false);
        let theme = client.string("theme", &Context::new("user-42"), "light");
        println!(
            "[sdk] revision {:>3}: new-checkout on for {rolled:>2}/20 users | beta-banner(user-1)={banner} | theme(user-42)={theme}",
            client.snapshot().revision()
        );
    };
    let status = client.wait_ready(Duration::from_secs(5)).await;
    println!("[sdk] connected to {grpc}: has data = {}, stale = {}", status.has_data(), status.is_stale());
    show(&client);
    let mut shown = client.snapshot().revision();
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    let mut step = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            change = changes.recv() => {
                if change.is_ok() && client.snapshot().revision() != shown {
                    shown = client.snapshot().revision();
                    show(&client);
                }
            }
            _ = tick.tick() => {
                step += 1;
                let percent = [10u32, 50, 90, 100, 0][step as usize % 5];
                let rollout = pb::Serve {
                    kind: Some(pb::serve::Kind::Rollout(pb::Rollout {
                        bucket_by: String::new(),
                        seed: None,
                        variations: vec![
                            pb::WeightedVariation { variation: 0, weight: percent * 1_000 },
                            pb::WeightedVariation { variation: 1, weight: (100 - percent) * 1_000 },
                        ],
                        context_kind: String::new(),
                        bucketing: None,
                    })),
                };
                let ops = vec![
                    Op::PatchFlag {
                        key: "new-checkout".into(),
                        expected: None,
                        patches: vec![pb::FlagPatch { op: Some(pb::flag_patch::Op::SetFallthrough(rollout)) }],
                    },
                    Op::PatchFlag {
                        key: "beta-banner".into(),
                        expected: None,
                        patches: vec![pb::FlagPatch { op: Some(pb::flag_patch::Op::SetOn(step.is_multiple_of(2))) }],
                    },
                ];
                match store.write("demo", ops, None, &Who::relay("demo-writer"), "demo churn").await {
                    Ok(r) => println!("[writer] revision {:>3}: new-checkout rollout {percent}%, beta-banner {}", r.revision, if step.is_multiple_of(2) { "on" } else { "off" }),
                    Err(e) => println!("[writer] write refused: {e}"),
                }
            }
        }
    }
}
