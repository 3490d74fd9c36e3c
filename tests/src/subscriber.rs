//! A minimal Subscribe client for tests: sends a Hello, assembles chunked
//! snapshots, applies deltas, verifies the checksum after every apply by
//! full recomputation, and acks. It is deliberately simple and separate
//! from the SDK so relay tests observe the raw protocol.

use std::collections::BTreeMap;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use pb::subscribe_response::Kind;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;
use xxhash_rust::xxh3::Xxh3;

/// What one received message did.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A complete snapshot was applied, at this revision, in this many chunks.
    Snapshot {
        /// Revision.
        revision: u64,
        /// Chunks it came in.
        chunks: u32,
    },
    /// A delta was applied.
    Delta {
        /// From revision.
        from: u64,
        /// To revision.
        to: u64,
    },
    /// A heartbeat.
    Heartbeat {
        /// The relay's head revision.
        head: u64,
    },
    /// The relay asked us to reconnect.
    Reconnect {
        /// Why.
        reason: pb::ReconnectReason,
        /// Suggested delay.
        delay_ms: u32,
    },
}

/// One subscriber's view of an environment.
#[derive(Debug)]
pub struct Subscriber {
    tx: mpsc::Sender<pb::SubscribeRequest>,
    rx: Streaming<pb::SubscribeResponse>,
    /// Store epoch of the applied data.
    pub epoch: String,
    /// Applied revision.
    pub revision: u64,
    /// Applied flags.
    pub flags: BTreeMap<String, pb::Flag>,
    /// Applied segments.
    pub segments: BTreeMap<String, pb::Segment>,
    partial: Vec<pb::SnapshotChunk>,
    /// Every update so far.
    pub history: Vec<Update>,
    /// The heartbeat every stream opens with (recorded in `history`, not
    /// returned by [`Subscriber::next`]).
    pub opening_heartbeat: Option<u64>,
    /// The latest heartbeat received (the opening one included).
    pub heartbeat: Option<pb::Heartbeat>,
    /// Whether each applied snapshot or delta is acked at once (as every
    /// test but the ack tests wants); else [`Subscriber::send`] acks.
    pub auto_ack: bool,
}

/// Checksum of a state, by PROTOCOL.md §3.1, over re-encoded items (the
/// relay stores prost's canonical encoding, so re-encoding is exact here).
pub fn checksum(flags: &BTreeMap<String, pb::Flag>, segments: &BTreeMap<String, pb::Segment>) -> u64 {
    let h = |kind: u8, key: &str, bytes: &[u8]| {
        let mut x = Xxh3::new();
        x.update(&[kind]);
        x.update(key.as_bytes());
        x.update(&[0]);
        x.update(bytes);
        x.digest()
    };
    let f = flags.iter().map(|(k, v)| h(1, k, &v.encode_to_vec()));
    let s = segments.iter().map(|(k, v)| h(2, k, &v.encode_to_vec()));
    f.chain(s).fold(0u64, u64::wrapping_add)
}

impl Subscriber {
    /// Opens a stream on `channel` with this key and cursor, announcing
    /// every evaluation feature this build implements (a current client).
    pub async fn connect(
        channel: Channel,
        sdk_key: &str,
        cursor: Option<(String, u64)>,
    ) -> Result<Subscriber, tonic::Status> {
        Subscriber::connect_with_features(channel, sdk_key, cursor, flagstream::feature::IMPLEMENTED).await
    }

    /// [`Subscriber::connect`] announcing only `features` (an older client
    /// announces fewer).
    pub async fn connect_with_features(
        channel: Channel,
        sdk_key: &str,
        cursor: Option<(String, u64)>,
        features: &[&str],
    ) -> Result<Subscriber, tonic::Status> {
        let (tx, rx) = mpsc::channel(16);
        let (epoch, revision) = cursor.clone().unwrap_or_default();
        let hello = pb::Hello {
            sdk_key: sdk_key.into(),
            cursor: Some(pb::Cursor { epoch: epoch.clone(), revision }),
            sdk_name: "flagstream-tests".into(),
            sdk_version: "0".into(),
            features: features.iter().map(|f| (*f).to_owned()).collect(),
            ..Default::default()
        };
        tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) })
            .await
            .map_err(|_| tonic::Status::internal("request channel closed"))?;
        let mut client = SyncClient::new(channel).max_decoding_message_size(16 << 20);
        let rx = client.subscribe(ReceiverStream::new(rx)).await?.into_inner();
        Ok(Subscriber {
            tx,
            rx,
            epoch,
            revision,
            flags: BTreeMap::new(),
            segments: BTreeMap::new(),
            partial: Vec::new(),
            history: Vec::new(),
            opening_heartbeat: None,
            heartbeat: None,
            auto_ack: true,
        })
    }

    /// Opens a new stream that resumes from this subscriber's applied
    /// state (as an SDK does after a reconnect), keeping its flags.
    pub async fn reconnect(&mut self, channel: Channel, sdk_key: &str) -> Result<(), tonic::Status> {
        let fresh = Subscriber::connect(channel, sdk_key, Some(self.cursor())).await?;
        self.tx = fresh.tx;
        self.rx = fresh.rx;
        self.partial.clear();
        self.opening_heartbeat = None;
        Ok(())
    }

    /// The cursor to resume from.
    pub fn cursor(&self) -> (String, u64) {
        (self.epoch.clone(), self.revision)
    }

    /// Receives messages until one completes an update (a whole snapshot,
    /// a delta, a heartbeat or a reconnect); acks applied revisions.
    /// Errors: stream ended, timed out, or a checksum mismatch.
    pub async fn next(&mut self, timeout: Duration) -> Result<Update, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.rx.message())
                .await
                .map_err(|_| "timed out waiting for a message".to_owned())?
                .map_err(|s| format!("stream failed: {s}"))?
                .ok_or_else(|| "stream ended".to_owned())?;
            let update = match msg.kind {
                Some(Kind::SnapshotChunk(c)) => {
                    let (last, revision, chunks) = (c.last_chunk, c.revision, c.total_chunks);
                    if c.chunk_index as usize != self.partial.len() {
                        return Err(format!(
                            "chunk {} arrived after {} chunks",
                            c.chunk_index,
                            self.partial.len()
                        ));
                    }
                    self.partial.push(c);
                    if !last {
                        continue;
                    }
                    let parts = std::mem::take(&mut self.partial);
                    self.flags = parts
                        .iter()
                        .flat_map(|c| c.flags.iter().map(|f| (f.key.clone(), f.clone())))
                        .collect();
                    self.segments = parts
                        .iter()
                        .flat_map(|c| c.segments.iter().map(|s| (s.key.clone(), s.clone())))
                        .collect();
                    self.epoch = parts[0].epoch.clone();
                    self.revision = revision;
                    self.verify(parts[0].checksum)?;
                    Update::Snapshot { revision, chunks }
                }
                Some(Kind::Delta(d)) => {
                    if d.from_revision != self.revision || d.epoch != self.epoch {
                        return Err(format!(
                            "delta from {} but we are at {}",
                            d.from_revision, self.revision
                        ));
                    }
                    for f in d.upserted_flags {
                        self.flags.insert(f.key.clone(), f);
                    }
                    for s in d.upserted_segments {
                        self.segments.insert(s.key.clone(), s);
                    }
                    for k in &d.deleted_flag_keys {
                        self.flags.remove(k);
                    }
                    for k in &d.deleted_segment_keys {
                        self.segments.remove(k);
                    }
                    self.revision = d.to_revision;
                    self.verify(d.checksum)?;
                    Update::Delta { from: d.from_revision, to: d.to_revision }
                }
                Some(Kind::Heartbeat(h)) if self.opening_heartbeat.is_none() => {
                    self.opening_heartbeat = Some(h.head_revision);
                    self.history.push(Update::Heartbeat { head: h.head_revision });
                    self.heartbeat = Some(h);
                    continue;
                }
                Some(Kind::Heartbeat(h)) => {
                    let head = h.head_revision;
                    self.heartbeat = Some(h);
                    Update::Heartbeat { head }
                }
                Some(Kind::Reconnect(r)) => Update::Reconnect {
                    reason: pb::ReconnectReason::try_from(r.reason)
                        .unwrap_or(pb::ReconnectReason::Unspecified),
                    delay_ms: r.suggested_delay_ms,
                },
                None => continue,
            };
            if self.auto_ack && matches!(update, Update::Snapshot { .. } | Update::Delta { .. }) {
                self.ack().await;
            }
            self.history.push(update.clone());
            return Ok(update);
        }
    }

    /// Like [`next`](Self::next), but skips periodic heartbeats: the next
    /// snapshot, delta or reconnect (or an error). Streams start their
    /// heartbeat at a random phase, so a test that expects data next must
    /// not trip over a heartbeat that happens to come first.
    pub async fn next_change(&mut self, timeout: Duration) -> Result<Update, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await? {
                Update::Heartbeat { .. } => continue,
                update => return Ok(update),
            }
        }
    }

    fn verify(&self, want: u64) -> Result<(), String> {
        let got = checksum(&self.flags, &self.segments);
        if got == want {
            Ok(())
        } else {
            Err(format!("checksum mismatch at revision {}: {got:#x} != {want:#x}", self.revision))
        }
    }

    /// Acks the applied revision.
    pub async fn ack(&self) {
        let ack = pb::Ack { epoch: self.epoch.clone(), revision: self.revision, ..Default::default() };
        // The relay may already have closed the stream; an ack is advisory.
        if self
            .tx
            .send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) })
            .await
            .is_err()
        {
            eprintln!("ack not sent: request stream closed");
        }
    }

    /// Sends any request message (e.g. a usage summary); `Err` when the
    /// request stream is closed.
    pub async fn send(&self, req: pb::SubscribeRequest) -> Result<(), String> {
        self.tx.send(req).await.map_err(|_| "request stream closed".to_owned())
    }

    /// Receives until the applied revision reaches `revision`.
    pub async fn wait_revision(&mut self, revision: u64, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.revision < revision {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.next(left).await?;
        }
        Ok(())
    }
}

/// A subscriber whose heartbeats are timed while something else happens
/// (an attack on the relay): [`HeartbeatWatch::stop`] gives it back with
/// the largest gap between two of its messages in that time.
#[derive(Debug)]
pub struct HeartbeatWatch {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<(Subscriber, Duration, usize)>,
}

impl HeartbeatWatch {
    /// Starts reading `sub`'s stream on a task of its own.
    pub fn start(mut sub: Subscriber) -> HeartbeatWatch {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let (mut last, mut largest, mut heartbeats) = (tokio::time::Instant::now(), Duration::ZERO, 0);
            let mut stopping = false;
            loop {
                tokio::select! {
                    _ = &mut stopped, if !stopping => stopping = true,
                    update = sub.next(crate::STEP) => {
                        let update = update.expect("the watched stream goes on");
                        assert!(matches!(update, Update::Heartbeat { .. }), "only heartbeats expected: {update:?}");
                        let now = tokio::time::Instant::now();
                        largest = largest.max(now - last);
                        (last, heartbeats) = (now, heartbeats + 1);
                        // Once stopped, one more heartbeat ends the watch: the
                        // gap still open then counts, and the stream is
                        // shown alive after whatever was watched.
                        if stopping {
                            break;
                        }
                    }
                }
            }
            (sub, largest, heartbeats)
        });
        HeartbeatWatch { stop, task }
    }

    /// Ends the watch at the stream's next heartbeat: the subscriber, the
    /// largest gap between its heartbeats while watched (that last one
    /// included), and how many arrived.
    pub async fn stop(self) -> (Subscriber, Duration, usize) {
        // The task may have ended already (its assertion failed): the join
        // below reports that.
        let _ = self.stop.send(());
        self.task.await.expect("the heartbeat watch")
    }
}
