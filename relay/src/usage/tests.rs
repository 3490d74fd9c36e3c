use super::check::check;
use super::*;
use flagstream::usage::{MAX_DEFAULT_BYTES, MAX_FLAGS_PER_SUMMARY, MAX_VARIATIONS};
use prost::Message as _;

/// An environment that is not deleted.
static LIVE: AtomicBool = AtomicBool::new(false);

/// Every key, in one page.
const ALL: Keys<'static> = Keys::Page { after: "", size: usize::MAX };

fn entry(key: &str, variations: Vec<u64>, defaults: &[&str]) -> pb::FlagUsage {
    pb::FlagUsage {
        key: key.into(),
        variations,
        defaults: defaults.iter().map(|d| (*d).to_owned()).collect(),
        ..Default::default()
    }
}

#[test]
fn windows_sdks_defaults_and_mismatch() {
    let set: flagstream::FlagSet = serde_json::from_str(
        r#"{"flags":[{"key":"kill","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
    )
    .unwrap();
    let snap = Snapshot::compile(&set, &flagstream::Limits::default()).unwrap();
    let u = Usage::new(Metrics::new(), true);
    let s = pb::UsageSummary { flags: vec![entry("kill", vec![0, 5], &["true"])], ..Default::default() };
    check(&s).unwrap();
    u.ingest(&LIVE, "prod", "a", false, &snap, s.clone());
    u.ingest(&LIVE, "prod", "b", false, &snap, s);
    let v = u.view("prod", &snap, ALL);
    let f = &v.flags[0];
    assert_eq!(f.key, "kill");
    assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 10]);
    assert_eq!(f.hour.as_ref().unwrap().variations, vec![0, 10]);
    assert_eq!((f.sdks, f.majority_variation, f.sole_variation), (2, 1, 1));
    assert!(f.default_mismatch && f.defaults[0].mismatch, "true passed, false served");
    let fwd = u.forward("prod");
    assert_eq!(fwd[0].flags[0].variations, vec![0, 10]);
    assert_eq!(fwd[0].flags[0].instances, 2);
    assert!(u.forward("prod").is_empty(), "forwarded once");
}

#[test]
fn per_flag_fallback_series_are_bounded() {
    let flags: Vec<String> = (0..MAX_FLAG_SERIES + 5)
        .map(|i| format!(r#"{{"key":"f{i}","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{{"variation":0}}}}"#))
        .collect();
    let set: flagstream::FlagSet =
        serde_json::from_str(&format!(r#"{{"flags":[{}]}}"#, flags.join(","))).unwrap();
    let snap = Snapshot::compile(&set, &flagstream::Limits::default()).unwrap();
    let metrics = Metrics::new();
    let u = Usage::new(metrics.clone(), false);
    let wrong_type = |key: String| pb::FlagUsage { key, fallback_wrong_type: 2, ..Default::default() };
    // Made-up keys first: they must not take the real flags' series.
    let made_up = (0..MAX_FLAG_SERIES).map(|i| wrong_type(format!("typo-{i}"))).collect();
    u.ingest(&LIVE, "prod", "a", false, &snap, pb::UsageSummary { flags: made_up, ..Default::default() });
    let real = (0..MAX_FLAG_SERIES + 5).map(|i| wrong_type(format!("f{i}"))).collect();
    u.ingest(&LIVE, "prod", "a", false, &snap, pb::UsageSummary { flags: real, ..Default::default() });
    let value = |flag: &str| {
        let labels = vec![("environment", "prod".to_owned()), ("flag", flag.to_owned())];
        metrics.usage_flag_fallbacks.get_or_create(&labels).get()
    };
    assert_eq!(
        value(UNKNOWN_FLAGS),
        2 * MAX_FLAG_SERIES as u64,
        "every made-up key's fallbacks, in one series"
    );
    assert_eq!(value("f0"), 2);
    assert_eq!(value(&format!("f{}", MAX_FLAG_SERIES - 1)), 2);
    assert_eq!(value(OTHER_FLAGS), 10, "the 5 flags past the bound share one series");
    let text = metrics.render();
    let series = text.lines().filter(|l| l.starts_with("flagstream_usage_flag_fallbacks_total{")).count();
    assert_eq!(series, MAX_FLAG_SERIES + 2, "100 flags, _other and _unknown");
}

#[test]
fn made_up_keys_take_only_their_environments_share() {
    let snap = Snapshot::empty();
    let u = Usage::new(Metrics::new(), false);
    for chunk in 0..3 {
        let flags = (0..1000).map(|i| entry(&format!("junk-{chunk}-{i}"), vec![1], &[])).collect();
        u.ingest(&LIVE, "noisy", "a", false, &snap, pb::UsageSummary { flags, ..Default::default() });
    }
    let v = u.view("noisy", &snap, ALL);
    assert_eq!(v.flags.len(), MAX_ABSENT_KEYS);
    assert_eq!(v.dropped_keys, 3000 - MAX_ABSENT_KEYS as u64);
    u.ingest(
        &LIVE,
        "quiet",
        "b",
        false,
        &snap,
        pb::UsageSummary { flags: vec![entry("gone", vec![], &[])], ..Default::default() },
    );
    assert_eq!(u.view("quiet", &snap, ALL).flags.len(), 1, "another environment still has room");
}

#[test]
fn bounds_name_the_field() {
    let many = pb::UsageSummary {
        flags: (0..=MAX_FLAGS_PER_SUMMARY).map(|i| entry(&format!("k{i}"), vec![1], &[])).collect(),
        ..Default::default()
    };
    assert_eq!(check(&many).unwrap_err().field, "usage.flags");
    let long = pb::UsageSummary { flags: vec![entry(&"k".repeat(300), vec![], &[])], ..Default::default() };
    assert_eq!(check(&long).unwrap_err().field, "usage.flags.key");
    let d = "x".repeat(MAX_DEFAULT_BYTES + 1);
    let big = pb::UsageSummary { flags: vec![entry("k", vec![], &[&d])], ..Default::default() };
    assert_eq!(check(&big).unwrap_err().field, "usage.flags.defaults");
}
fn kill_switch() -> Snapshot {
    let set: flagstream::FlagSet = serde_json::from_str(
        r#"{"flags":[{"key":"kill","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
    )
    .unwrap();
    Snapshot::compile(&set, &flagstream::Limits::default()).unwrap()
}

#[test]
fn variation_counts_are_clamped_to_the_flag() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), true);
    let mut counts = vec![1u64; MAX_VARIATIONS];
    counts[1] = 7;
    let mut junk = entry("junk", vec![3; MAX_VARIATIONS], &[]);
    junk.fallback_missing = 2;
    let s = pb::UsageSummary { flags: vec![entry("kill", counts, &[]), junk], ..Default::default() };
    check(&s).unwrap();
    u.ingest(&LIVE, "prod", "a", false, &snap, s);
    let v = u.view("prod", &snap, ALL);
    let kill = v.flags.iter().find(|f| f.key == "kill").unwrap();
    assert_eq!(kill.day.as_ref().unwrap().variations, vec![1, 7], "2 variations, 2 counts");
    assert_eq!(kill.hour.as_ref().unwrap().variations, vec![1, 7]);
    let junk = v.flags.iter().find(|f| f.key == "junk").unwrap();
    assert!(junk.day.as_ref().unwrap().variations.is_empty(), "no flag: fallbacks only");
    assert_eq!(junk.day.as_ref().unwrap().fallback_missing, 2);
    let fwd = u.forward("prod");
    for f in &fwd[0].flags {
        assert!(f.variations.len() <= 2, "{}: {:?}", f.key, f.variations);
    }
}

#[test]
fn made_up_keys_never_displace_real_flags() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), false);
    // Fill the relay-wide bound of keys that are no flag.
    for env in 0..MAX_KEYS / 1000 {
        let flags = (0..1000).map(|i| entry(&format!("junk-{i}"), vec![], &[])).collect();
        u.ingest(
            &LIVE,
            &format!("env-{env}"),
            "a",
            false,
            &snap,
            pb::UsageSummary { flags, ..Default::default() },
        );
    }
    assert_eq!(u.counts.absent.load(Ordering::Relaxed), MAX_KEYS);
    let s = pb::UsageSummary {
        flags: vec![entry("more-junk", vec![], &[]), entry("kill", vec![0, 1], &[])],
        ..Default::default()
    };
    u.ingest(&LIVE, "env-0", "a", false, &snap, s.clone());
    u.ingest(&LIVE, "fresh", "a", false, &snap, s);
    for env in ["env-0", "fresh"] {
        let v = u.view(env, &snap, Keys::One("kill"));
        assert_eq!(v.flags[0].day.as_ref().unwrap().variations, vec![0, 1], "{env}: the real flag is kept");
        assert_eq!(u.view(env, &snap, Keys::One("more-junk")).flags[0].last_evaluated_unix_ms, 0);
    }
    assert_eq!(u.view("fresh", &snap, ALL).dropped_keys, 1, "this environment's own");
    assert_eq!(u.view("env-0", &snap, ALL).dropped_keys, 1);
}

#[test]
fn instances_only_from_replicas() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), false);
    let mut e = entry("kill", vec![0, 1], &[]);
    e.instances = u32::MAX;
    u.ingest(
        &LIVE,
        "prod",
        "sdk",
        false,
        &snap,
        pb::UsageSummary { flags: vec![e.clone()], ..Default::default() },
    );
    assert_eq!(u.view("prod", &snap, Keys::One("kill")).flags[0].sdks, 1, "an SDK stream is one instance");
    e.instances = 5;
    u.ingest(
        &LIVE,
        "prod",
        "replica",
        true,
        &snap,
        pb::UsageSummary { flags: vec![e], ..Default::default() },
    );
    assert_eq!(u.view("prod", &snap, Keys::One("kill")).flags[0].sdks, 6, "a replica stands for its subtree");
}

/// What another relay of a shared database passed on counts here, but
/// is not passed on again: neither its evaluations nor its instances.
#[test]
fn a_peers_usage_is_counted_but_not_passed_back() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), true);
    let one = pb::UsageSummary { flags: vec![entry("kill", vec![0, 2], &[])], ..Default::default() };
    u.ingest(&LIVE, "prod", "sdk", false, &snap, one);
    let mut theirs = entry("kill", vec![0, 7], &[]);
    theirs.instances = 3;
    u.ingest_peer(
        &LIVE,
        "prod",
        "relay-b",
        PeerRow::default(),
        &snap,
        pb::UsageSummary { flags: vec![theirs.clone()], ..Default::default() },
    );
    let f = &u.view("prod", &snap, Keys::One("kill")).flags[0];
    assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 9]);
    assert_eq!(f.sdks, 4, "this relay's SDK and the other relay's three");
    let out = u.forward("prod");
    assert_eq!(out[0].flags[0].variations, vec![0, 2], "only this relay's own evaluations go out");
    assert_eq!(out[0].flags[0].instances, 1, "only this relay's own instances");
    // An earlier process of this relay: its evaluations count, its
    // instances (this process's SDKs now) do not.
    let own = PeerRow { own: true, backlog: true };
    u.ingest_peer(
        &LIVE,
        "prod",
        "this-relay",
        own,
        &snap,
        pb::UsageSummary { flags: vec![theirs], ..Default::default() },
    );
    let f = &u.view("prod", &snap, Keys::One("kill")).flags[0];
    assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 16]);
    assert_eq!(f.sdks, 4, "no SDK counted twice");
}

/// Rows taken as a backlog at start are in the view, not in the
/// metrics (a restart must not add an hour of fallbacks to their rate).
#[test]
fn a_backlog_is_not_counted_in_the_metrics() {
    let snap = kill_switch();
    let metrics = Metrics::new();
    let u = Usage::new(metrics.clone(), true);
    let mut e = entry("kill", vec![], &[]);
    e.fallback_wrong_type = 4;
    let row = PeerRow { own: false, backlog: true };
    u.ingest_peer(
        &LIVE,
        "prod",
        "relay-b",
        row,
        &snap,
        pb::UsageSummary { flags: vec![e.clone()], ..Default::default() },
    );
    let fallbacks = |m: &Metrics| {
        let labels = vec![("environment", "prod".to_owned()), ("cause", "wrong_type".to_owned())];
        m.usage_fallbacks.get_or_create(&labels).get()
    };
    assert_eq!(fallbacks(&metrics), 0);
    assert_eq!(
        u.view("prod", &snap, Keys::One("kill")).flags[0].day.as_ref().unwrap().fallback_wrong_type,
        4
    );
    u.ingest_peer(
        &LIVE,
        "prod",
        "relay-b",
        PeerRow::default(),
        &snap,
        pb::UsageSummary { flags: vec![e], ..Default::default() },
    );
    assert_eq!(fallbacks(&metrics), 4, "a row passed on after the start is counted");
}

#[test]
fn other_defaults_count_evaluations() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), false);
    // Every candidate place taken by a default two instances pass.
    for d in 0..MAX_DEFAULT_CANDIDATES {
        for who in ["a", "b"] {
            let s = pb::UsageSummary {
                flags: vec![entry("kill", vec![1], &[&d.to_string()])],
                ..Default::default()
            };
            u.ingest(&LIVE, "prod", &format!("{who}{d}"), false, &snap, s);
        }
    }
    // Another default, 10 evaluations, 2 more with defaults the SDK could
    // not list: 12 evaluations with other defaults.
    let mut e = entry("kill", vec![6, 4], &["99"]);
    e.other_defaults = 2;
    e.fallback_missing = 2;
    u.ingest(&LIVE, "prod", "s9", false, &snap, pb::UsageSummary { flags: vec![e], ..Default::default() });
    let f = &u.view("prod", &snap, Keys::One("kill")).flags[0];
    assert_eq!(f.defaults.len(), MAX_DEFAULTS);
    assert!(f.defaults.iter().all(|d| d.json != "99"));
    assert_eq!(f.other_defaults_day, 12);
}

#[test]
fn the_outbox_counts_the_defaults_it_cannot_list() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), true);
    for (i, d) in ["1", "2", "3", "4"].iter().enumerate() {
        let s = pb::UsageSummary { flags: vec![entry("kill", vec![1], &[d])], ..Default::default() };
        u.ingest(&LIVE, "prod", &format!("s{i}"), false, &snap, s);
    }
    let mut e = entry("kill", vec![6, 4], &["5"]);
    e.other_defaults = 2;
    e.fallback_missing = 2;
    u.ingest(&LIVE, "prod", "s5", false, &snap, pb::UsageSummary { flags: vec![e], ..Default::default() });
    let fwd = u.forward("prod");
    assert_eq!(fwd[0].flags[0].defaults.len(), MAX_SUMMARY_DEFAULTS);
    assert_eq!(fwd[0].flags[0].other_defaults, 12, "the outbox counts the default it cannot list");
}

/// One SDK key sending made-up defaults cannot push out a default a fleet
/// passes, nor hide a mismatch by filling every place first.
#[test]
fn made_up_defaults_neither_push_out_a_fleets_nor_hide_a_mismatch() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), false);
    let report = |env: &str, who: &str, variations: Vec<u64>, d: &str| {
        let s = pb::UsageSummary { flags: vec![entry("kill", variations, &[d])], ..Default::default() };
        u.ingest(&LIVE, env, who, false, &snap, s);
    };
    // The fleet serves `false` and passes `true`: a mismatch.
    for i in 0..10 {
        report("prod", &format!("fleet-{i}"), vec![0, 5], "true");
    }
    for i in 0..50 {
        report("prod", "attacker", vec![0, 1], &format!("\"junk-{i}\""));
    }
    let f = &u.view("prod", &snap, Keys::One("kill")).flags[0];
    assert_eq!(f.defaults[0].json, "true", "listed first: seen from the most instances");
    assert!(f.defaults[0].mismatch && f.default_mismatch);

    // Every place taken first by made-up defaults two instances pass.
    for i in 0..MAX_DEFAULT_CANDIDATES {
        for who in ["x", "y"] {
            report("staging", who, vec![0, 5], &format!("\"junk-{i}\""));
        }
    }
    for i in 0..10 {
        report("staging", &format!("fleet-{i}"), vec![0, 5], "true");
    }
    let f = &u.view("staging", &snap, Keys::One("kill")).flags[0];
    assert!(f.defaults.iter().all(|d| d.json != "true"), "no place for it");
    assert!(f.default_mismatch, "the mismatch is reported all the same");
}

#[test]
fn forwarded_summaries_stay_under_the_byte_bound() {
    let snap = Snapshot::empty();
    let u = Usage::new(Metrics::new(), true);
    // A JSON string of exactly MAX_DEFAULT_BYTES bytes.
    let d = |i: usize, j: usize| format!("\"{i:04}-{j}-{}\"", "x".repeat(MAX_DEFAULT_BYTES - 9));
    // The worst case check() admits: 1,000 keys of 256 bytes, each
    // with 4 defaults of 256 bytes (keys that are no flag: no variation
    // counts survive).
    let flags: Vec<pb::FlagUsage> = (0..MAX_FLAGS_PER_SUMMARY)
        .map(|i| {
            let ds: Vec<String> = (0..4).map(|j| d(i, j)).collect();
            let mut e = entry(&format!("{i:0>256}"), vec![u64::MAX; MAX_VARIATIONS], &[]);
            e.defaults = ds;
            e.fallback_missing = u64::MAX;
            e
        })
        .collect();
    let s = pb::UsageSummary { flags, untracked_evaluations: u64::MAX, ..Default::default() };
    assert!(s.flags.iter().all(|f| f.defaults.iter().all(|d| d.len() == MAX_DEFAULT_BYTES)));
    check(&s).unwrap();
    assert!(s.encoded_len() > 1 << 20, "the case is over the upstream's limit unsplit");
    u.ingest(&LIVE, "prod", "a", false, &snap, s);
    let fwd = u.forward("prod");
    assert!(fwd.len() >= 3, "{} summaries", fwd.len());
    for m in &fwd {
        assert!(m.encoded_len() <= MAX_FORWARD_BYTES, "{} bytes", m.encoded_len());
        assert!(check(m).is_ok());
    }
    assert_eq!(fwd.iter().map(|m| m.flags.len()).sum::<usize>(), MAX_FLAGS_PER_SUMMARY);
    assert_eq!(fwd[0].untracked_evaluations, u64::MAX);
}

/// A summary that was on its way when its environment was deleted adds
/// nothing, and leaves no entry behind.
#[test]
fn a_deleted_environments_summary_adds_nothing() {
    let snap = kill_switch();
    let u = Usage::new(Metrics::new(), false);
    let s = || pb::UsageSummary { flags: vec![entry("kill", vec![1, 0], &["true"])], ..Default::default() };
    u.ingest(&LIVE, "prod", "a", false, &snap, s());
    assert_eq!(u.keys(), 1);
    let deleted = AtomicBool::new(true);
    u.forget_env("prod");
    assert_eq!(u.keys(), 0);
    u.ingest(&deleted, "prod", "a", false, &snap, s());
    assert_eq!(u.keys(), 0);
    assert!(u.env_cell("prod").is_none(), "no entry made for it");
}
