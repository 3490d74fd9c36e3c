//! The default mode: a relay, N subscribers over M connections, writes at
//! a rate; commit → receive latency, CPU per delivery, RSS per stream.

use super::*;

/// The propagation run (or `--throughput-writers`); `None` for the latter.
pub(super) async fn run(args: &Args) -> anyhow::Result<Option<Summary>> {
    if args.throughput_writers > 0 {
        throughput::run(
            args.throughput_writers,
            Duration::from_secs(args.throughput_secs),
            args.throughput_flags,
        )
        .await?;
        return Ok(None);
    }
    let dir = tempfile::tempdir()?;
    let pg = match args.postgres {
        true => Some(
            flagstream_tests::postgres::Postgres::start_durable()
                .ok_or_else(|| anyhow::anyhow!("no PostgreSQL server binaries"))?,
        ),
        false => None,
    };
    let pg_url = pg.as_ref().map(|pg| pg.database("loadgen"));
    let (streams, subs) =
        ((args.subscribers / args.connections + 16).to_string(), (args.subscribers + 100).to_string());
    let mut relay_args = vec![
        "--max-concurrent-streams",
        &streams,
        "--max-subscribers",
        &subs,
        "--max-subscribers-per-env",
        &subs,
        // The tool opens its subscribers at once and measures the relay,
        // not its admission quotas (`--noisy` measures those).
        "--max-subscribes-per-sec",
        &subs,
        "--quota-flags",
        "100000",
        "--quota-snapshot-bytes",
        "268435456",
        // Every load connection comes from 127.0.0.1.
        "--max-connections",
        "1000000",
        "--max-connections-per-address",
        "1000000",
    ];
    if args.heavy {
        relay_args.extend(["--heartbeat", "1s", "--quota-subscribes-per-sec", &subs]);
    } else if args.noisy {
        let (w, s) = (noisy::WRITE_QUOTA, noisy::SUBSCRIBE_QUOTA);
        relay_args.extend(["--quota-writes-per-sec", w, "--quota-subscribes-per-sec", s]);
    } else {
        relay_args.extend(["--quota-subscribes-per-sec", &subs]);
    }
    if let Some(url) = &pg_url {
        relay_args.extend(["--store", url.as_str()]);
    }
    let spread = format!("{}ms", args.ofrep_spread_ms);
    if args.ofrep_streams > 0 {
        relay_args.extend(ofrep::RELAY_ARGS);
        relay_args.extend(["--ofrep-event-spread", spread.as_str()]);
    }
    let relay = Relay::start(dir.path(), &relay_args).await;
    let key = relay.demo_key();
    let mut admin = relay.admin().await;
    // The extra flags in one batch (one revision).
    let ops = (0..args.flags)
        .map(|i| pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                flag: Some(bool_flag(&format!("bulk-{i}"), i % 2 == 0)),
                expected_version: None,
            })),
        })
        .collect();
    admin
        .batch(pb::BatchRequest {
            environment: "demo".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        })
        .await?;
    if args.heavy {
        heavy::setup(&mut admin).await?;
    }
    let noisy_setup = match args.noisy {
        true => Some(noisy::setup(&mut admin).await?),
        false => None,
    };
    // The relays subscribers connect to: the replicas, else the primary.
    let mut replicas = Vec::new();
    if args.replicas > 0 {
        let token = flagstream_tests::cluster::replicate_token(&relay, dir.path(), "loadgen").await;
        let head = relay.status().await.environments.iter().map(|e| e.head_revision).max().unwrap_or(0);
        for i in 0..args.replicas {
            let r = Relay::start_replica(
                &dir.path().join(format!("replica-{i}")),
                &[relay.url()],
                &token,
                &relay_args,
            )
            .await;
            let mut ready = r;
            ready.admin_secret = Some(relay.admin_token());
            ready.wait_ready().await;
            ready.wait_head("demo", head).await;
            replicas.push(ready);
        }
    }
    if pg_url.is_some() {
        // The second relay on the same database.
        let mut second_args = relay_args.clone();
        second_args.extend(["--demo", "false"]);
        let mut second = Relay::start(&dir.path().join("second"), &second_args).await;
        second.admin_secret = Some(relay.admin_token());
        let head = relay.status().await.environments.iter().map(|e| e.head_revision).max().unwrap_or(0);
        second.wait_head("demo", head).await;
        replicas.push(second);
    }
    let serving: Vec<&Relay> = if replicas.is_empty() {
        vec![&relay]
    } else if pg_url.is_some() {
        vec![&relay, &replicas[0]]
    } else {
        replicas.iter().collect()
    };
    let pids: Vec<u32> = serving.iter().map(|r| r.pid()).collect();
    let sum_stats =
        |pids: &[u32]| pids.iter().map(|p| proc_stats(*p)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, mut rss_before) = sum_stats(&pids);

    // The OFREP change streams first, on the tool's event loops.
    let sse = Arc::new(ofrep::Streams::default());
    let sse_loops = EventLoops::start(client_threads(args))?;
    let mut sse_tasks = Vec::new();
    let mut rss_per_sse_kib = 0.0;
    if args.ofrep_streams > 0 {
        let addr = relay.ofrep.ok_or_else(|| anyhow::anyhow!("the relay named no OFREP address"))?;
        let bulk = flagstream_tests::ofrep::post(
            addr,
            "/ofrep/v1/evaluate/flags",
            &[("Authorization", format!("Bearer {key}").as_str())],
            "{}",
        )
        .await
        .json();
        let uri = bulk["eventStreams"][0]["endpoint"]["requestUri"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("no change stream advertised: {bulk}"))?
            .to_owned();
        let (tx, mut rx) = mpsc::channel(args.ofrep_streams);
        for i in 0..args.ofrep_streams {
            let rt = &sse_loops.handles[i % sse_loops.handles.len()];
            sse_tasks.push(rt.spawn(ofrep::stream(addr, uri.clone(), sse.clone(), tx.clone())));
        }
        drop(tx);
        let mut opened = 0;
        while opened < args.ofrep_streams && rx.recv().await.is_some() {
            opened += 1;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (_, rss_sse) = sum_stats(&pids);
        rss_per_sse_kib = rss_sse.saturating_sub(rss_before) as f64 / args.ofrep_streams as f64;
        println!(
            "OFREP change streams   {opened} open ({} failed); relay RSS {rss_before} KiB before them, {rss_sse} KiB with them",
            sse.failed.load(Ordering::Relaxed)
        );
        rss_before = rss_sse;
    }

    // Revisions: the demo seed's few, one per bulk flag, one per write.
    let rec = Arc::new(Recorder::new(args.flags + args.writes + 64, Acking::of(args)));
    let urls: Vec<String> = serving.iter().map(|r| r.url()).collect();
    let threads = client_threads(args);
    let loops = EventLoops::start(threads)?;
    let (ready_tx, mut ready_rx) = mpsc::channel(args.subscribers.max(1));
    let started = Instant::now();
    let connections = args.connections.max(1);
    let mut opening = Vec::new();
    for c in 0..connections {
        // Subscribers i with i % connections == c.
        let n = args.subscribers / connections + usize::from(c < args.subscribers % connections);
        let rt = &loops.handles[c % loops.handles.len()];
        let url = &urls[c % urls.len()];
        opening.push(rt.spawn(connection(
            url.trim_start_matches("http://").to_owned(),
            url.clone(),
            key.clone(),
            n,
            rec.clone(),
            ready_tx.clone(),
        )));
    }
    let mut tasks = Vec::with_capacity(args.subscribers);
    for o in opening {
        tasks.extend(o.await??);
    }
    for _ in 0..args.subscribers {
        ready_rx.recv().await;
    }
    let connect_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ticks_idle, rss_idle) = sum_stats(&pids);
    let metric = |name: &'static str| {
        let serving = serving.clone();
        async move {
            let mut sum = 0.0;
            for r in serving {
                sum += r.metric(name).await;
            }
            sum
        }
    };
    let encodes_before = metric("flagstream_encodes_total{kind=\"delta\"}").await;
    let acks_before = metric("flagstream_ack_latency_seconds_count").await;

    let write_started = Instant::now();
    let period = Duration::from_secs_f64(1.0 / args.writes_per_sec);
    let mut revisions = Vec::new();
    let mut next = tokio::time::Instant::now();
    let mut heavy_writer = None;
    let mut flood = None;
    let mut first_heavy_revision = u64::MAX;
    for i in 0..args.writes {
        if args.heavy && i == args.writes / 2 {
            rec.phase.store(1, Ordering::Relaxed);
            heavy_writer = Some(heavy::Writer::start(relay.admin().await));
        }
        if let Some((token, key)) = noisy_setup.as_ref().filter(|_| i == args.writes / 2) {
            rec.phase.store(1, Ordering::Relaxed);
            flood = Some(noisy::Flood::start(&relay, token, key).await);
        }
        next += period;
        tokio::time::sleep_until(next).await;
        let revision = put(&mut admin, "demo", bool_flag("load-toggle", i % 2 == 0)).await?;
        if heavy_writer.is_some() || flood.is_some() {
            first_heavy_revision = first_heavy_revision.min(revision);
        }
        revisions.push(revision);
    }
    let heavy_report = match (heavy_writer, flood) {
        (Some(w), _) => Some(("heavy writes", w.stop().await?)),
        (None, Some(f)) => Some(("the noisy neighbour", f.stop().await?)),
        (None, None) => None,
    };
    // Wait (bounded) for every subscriber to have the last revision.
    let last = *revisions.last().unwrap_or(&0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if rec.count(last) >= args.subscribers as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let write_time = write_started.elapsed();
    let (ticks_end, rss_end) = sum_stats(&pids);
    if args.ofrep_streams > 0 {
        // The change streams' last events come up to the spread after the
        // last write, and the streams hand their samples over only when
        // the relay stops: wait the spread out (and a second more).
        tokio::time::sleep(Duration::from_millis(args.ofrep_spread_ms + 1000)).await;
    }
    let encodes = metric("flagstream_encodes_total{kind=\"delta\"}").await - encodes_before;
    let acks = metric("flagstream_ack_latency_seconds_count").await - acks_before;
    let errors = rec.errors.load(Ordering::Relaxed);
    let (own_ticks, _) = proc_stats(std::process::id());

    // Stopping the relay ends every stream; each subscriber then hands over
    // its latency samples.
    rec.stopping.store(true, Ordering::Relaxed);
    drop(serving);
    drop(replicas);
    drop(relay);
    drop(pg);
    let mut unfinished = 0;
    for t in tasks {
        // A subscriber that does not end (or panicked) gives no samples:
        // say so rather than report latencies over fewer deliveries silently.
        if !matches!(tokio::time::timeout(Duration::from_secs(30), t).await, Ok(Ok(()))) {
            unfinished += 1;
        }
    }
    if unfinished > 0 {
        eprintln!("warning: {unfinished} subscribers did not hand over their samples");
    }
    drop(loops);
    for t in sse_tasks {
        // A stream that does not end gives no samples; counted below.
        let _ended = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    drop(sse_loops);
    let samples = std::mem::take(&mut *rec.latencies_ms.lock().expect("recorder lock"));
    let phase_of = |revision: u64| usize::from(revision >= first_heavy_revision);
    let mut by_phase: [Vec<u64>; 2] = Default::default();
    for (revision, ms) in &samples {
        by_phase[phase_of(*revision)].push(*ms);
    }
    for p in &mut by_phase {
        p.sort_unstable();
    }
    let mut lat: Vec<u64> = samples.iter().map(|(_, ms)| *ms).collect();
    lat.sort_unstable();
    let mut all_by: Vec<u64> = revisions
        .iter()
        .filter(|r| rec.count(**r) >= args.subscribers as u64)
        .map(|r| {
            let i = *r as usize;
            rec.last_at_ms[i]
                .load(Ordering::Relaxed)
                .saturating_sub(rec.committed_ms[i].load(Ordering::Relaxed))
        })
        .collect();
    all_by.sort_unstable();
    let complete = all_by.len();
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let cpu = (ticks_end - ticks_idle) as f64 / ticks_per_sec / write_time.as_secs_f64() * 100.0;
    let cpu_per_delivery = (ticks_end - ticks_idle) as f64 / ticks_per_sec * 1e6 / lat.len().max(1) as f64;
    println!(
        "subscribers            {} over {} connections (all connected in {:.2?}){}",
        args.subscribers,
        args.connections,
        connect_time,
        if args.replicas > 0 {
            format!(
                ", spread over {} replicas of the primary (RSS and CPU below: the replicas, summed)",
                args.replicas
            )
        } else {
            String::new()
        }
    );
    println!(
        "environment            {} flags; {} writes at {}/s",
        args.flags + 5,
        args.writes,
        args.writes_per_sec
    );
    println!(
        "deliveries             {} (expected {}), stream errors {}",
        lat.len(),
        args.writes * args.subscribers,
        errors
    );
    println!(
        "commit->receive        p50 {} ms, p99 {} ms, max {} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().unwrap_or(&0)
    );
    println!(
        "commit->all received   p50 {} ms, p99 {} ms, max {} ms ({complete} of {} revisions reached everyone)",
        pct(&all_by, 0.5),
        pct(&all_by, 0.99),
        all_by.last().unwrap_or(&0),
        revisions.len()
    );
    println!(
        "relay RSS              {} KiB before subscribers, {} KiB idle with them, {} KiB after writes",
        rss_before, rss_idle, rss_end
    );
    println!(
        "relay RSS / subscriber {:.1} KiB",
        (rss_idle.saturating_sub(rss_before)) as f64 / args.subscribers as f64
    );
    println!(
        "relay CPU during writes {cpu:.1} % of one core = {cpu_per_delivery:.2} us per delivery (load tool: {:.1} s CPU in total)",
        own_ticks as f64 / ticks_per_sec
    );
    println!(
        "relay RSS / connection  {:.1} KiB (idle with subscribers minus before, over {} connections)",
        rss_idle.saturating_sub(rss_before) as f64 / args.connections.max(1) as f64,
        args.connections
    );
    println!("delta encodings        {encodes} for {} revisions", revisions.len());
    if args.ofrep_streams > 0 {
        let streams = std::mem::take(&mut *sse.events.lock().expect("recorder lock"));
        let sse_lat = ofrep::latencies(&streams, &revisions, |r| {
            rec.committed_ms.get(r as usize).map_or(0, |c| c.load(Ordering::Relaxed))
        });
        println!(
            "OFREP SSE commit->event p50 {} ms, p99 {} ms, max {} ms over {} (stream, write) pairs of {} expected, \
             ofrep-event-spread {} ms; gRPC p99 above {} ms; relay RSS / change stream {rss_per_sse_kib:.1} KiB",
            pct(&sse_lat, 0.5),
            pct(&sse_lat, 0.99),
            sse_lat.last().unwrap_or(&0),
            sse_lat.len(),
            streams.len() * revisions.len(),
            args.ofrep_spread_ms,
            pct(&lat, 0.99),
        );
    }
    println!("acks the relay timed   {acks} (commit->ack latency samples)");
    if let Some((what, h)) = heavy_report {
        for (phase, name) in [(0, "baseline (quiet)".to_owned()), (1, format!("during {what}"))] {
            let l = &by_phase[phase];
            println!(
                "{name:<27} commit->receive p50 {} ms, p99 {} ms, max {} ms over {} deliveries; longest gap between messages {} ms",
                pct(l, 0.5),
                pct(l, 0.99),
                l.last().unwrap_or(&0),
                l.len(),
                rec.max_gap_ms[phase].load(Ordering::Relaxed)
            );
        }
        println!("{h}");
        let (quiet, loud) = (pct(&by_phase[0], 0.99), pct(&by_phase[1], 0.99));
        // Only the noisy-neighbour run has a target for this ratio.
        let target = if what.contains("heavy") { "" } else { "; the target for --noisy is at most 2x" };
        println!(
            "p99 during / baseline      {:.2}x ({loud} ms / {quiet} ms{target})",
            loud as f64 / quiet.max(1) as f64
        );
    }
    Ok(Some(Summary::new(
        &lat,
        ticks_end - ticks_idle,
        write_time,
        rss_idle.saturating_sub(rss_before),
        complete,
    )))
}

/// What one propagation run measured, for the `--floor` comparison.
#[derive(Debug, Clone, Copy)]
pub(super) struct Summary {
    pub(super) p50_ms: u64,
    pub(super) p99_ms: u64,
    pub(super) max_ms: u64,
    pub(super) deliveries: usize,
    /// Server CPU during the writes (from /proc), µs per delivery.
    pub(super) cpu_us_per_delivery: f64,
    /// Server CPU during the writes, % of one core.
    pub(super) cpu_pct: f64,
    /// Server RSS with the subscribers connected minus before, KiB.
    pub(super) rss_delta_kib: u64,
    /// Revisions every subscriber received.
    pub(super) complete: usize,
}

impl Summary {
    pub(super) fn new(
        lat: &[u64],
        ticks: u64,
        write_time: Duration,
        rss_delta_kib: u64,
        complete: usize,
    ) -> Summary {
        let cpu_s = ticks as f64 / 100.0; // USER_HZ on Linux
        Summary {
            p50_ms: pct(lat, 0.5),
            p99_ms: pct(lat, 0.99),
            max_ms: lat.last().copied().unwrap_or(0),
            deliveries: lat.len(),
            cpu_us_per_delivery: cpu_s * 1e6 / lat.len().max(1) as f64,
            cpu_pct: cpu_s / write_time.as_secs_f64() * 100.0,
            rss_delta_kib,
            complete,
        }
    }

    /// `name: p50 …, p99 …, CPU …, RSS …` for one server.
    pub(super) fn line(&self, name: &str, args: &Args) -> String {
        format!(
            "{name:<6} p50 {} ms, p99 {} ms, max {} ms over {} deliveries ({} of {} revisions reached everyone); \
             CPU {:.1} % of a core = {:.2} us per delivery ({:.1} ms of CPU per revision per 1,000 streams); \
             RSS {:.1} KiB per connection = {:.2} KiB per stream",
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.deliveries,
            self.complete,
            args.writes,
            self.cpu_pct,
            self.cpu_us_per_delivery,
            self.cpu_us_per_delivery, // µs per delivery × 1,000 streams = ms per revision
            self.rss_delta_kib as f64 / args.connections.max(1) as f64,
            self.rss_delta_kib as f64 / args.subscribers.max(1) as f64,
        )
    }
}
