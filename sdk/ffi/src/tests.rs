//! The ABI from Rust: panics, test data, bad input.

use super::*;

fn last_error() -> String {
    let mut ptr = std::ptr::null();
    // SAFETY: a valid out pointer.
    let len = unsafe { flagstream_last_error(&mut ptr) };
    // SAFETY: the library's own message, valid until the next call.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(ptr, len) }).into_owned()
}

/// A panic inside the library is a status and a message, never an
/// unwind into the caller.
#[test]
fn a_panic_becomes_a_status_and_a_message() {
    let status = guard(|| panic!("boom at the boundary"));
    assert_eq!(status, FlagstreamStatus::Panic);
    assert_eq!(last_error(), "flagstream panicked: boom at the boundary");
}

/// Test data through the ABI: a flag's value and detail, a context
/// kept and changed, bad input refused by name.
#[test]
fn test_data_through_the_abi() {
    let options = r#"{"test_data": "flags:\n  - {key: on, type: bool, variations: [true, false], on: true, off_variation: 1, rules: [{clauses: [{attribute: plan, op: in, values: [pro]}], serve: {variation: 0}}], fallthrough: {variation: 1}}\n"}"#;
    let mut client = std::ptr::null_mut();
    // SAFETY: valid pointers and lengths throughout.
    unsafe {
        assert_eq!(flagstream_client_new(options.as_ptr(), options.len(), &mut client), FlagstreamStatus::Ok);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(flagstream_context_new(b"u1".as_ptr(), 2, &mut ctx), FlagstreamStatus::Ok);
        let (mut value, mut detail) = (true, std::mem::zeroed::<FlagstreamDetail>());
        assert_eq!(
            flagstream_eval_bool(client, b"on".as_ptr(), 2, ctx, true, &mut value, &mut detail),
            FlagstreamStatus::Ok
        );
        assert_eq!((value, detail.reason, detail.variation), (false, 3, 1), "the fallthrough");
        assert_eq!(
            flagstream_context_set_string(ctx, b"plan".as_ptr(), 4, b"pro".as_ptr(), 3),
            FlagstreamStatus::Ok
        );
        assert_eq!(
            flagstream_eval_bool(client, b"on".as_ptr(), 2, ctx, false, &mut value, &mut detail),
            FlagstreamStatus::Ok
        );
        assert_eq!(
            (value, detail.reason, detail.rule_index),
            (true, 2, 0),
            "the rule, once the kept context changed"
        );
        assert_eq!(
            flagstream_eval_bool(client, [0xff].as_ptr(), 1, ctx, false, &mut value, &mut detail),
            FlagstreamStatus::InvalidArgument
        );
        assert!(last_error().starts_with("key: not UTF-8"), "{}", last_error());
        flagstream_context_free(ctx);
        flagstream_client_free(client);
    }
}

/// Unvalidated test data serves a malformed flag as `MALFORMED_FLAG` (and
/// counts it); handles of every type; an evaluation at a time; an
/// attribute removed with JSON null.
#[test]
fn unvalidated_data_handles_and_times() {
    let options = r#"{"validate": false, "test_data": "flags:\n  - {key: broken, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 7}}\n  - {key: limit, type: int, variations: [1, 2], on: true, off_variation: 0, rules: [{id: r, clauses: [{attribute: plan, op: in, values: [pro]}], serve: {variation: 1}}], fallthrough: {variation: 0}}\n  - {key: name, type: string, variations: [a, b], on: false, off_variation: 1, fallthrough: {variation: 0}}\n"}"#;
    let mut client = std::ptr::null_mut();
    // SAFETY: valid pointers and lengths throughout.
    unsafe {
        assert_eq!(flagstream_client_new(options.as_ptr(), options.len(), &mut client), FlagstreamStatus::Ok);
        let mut ctx = std::ptr::null_mut();
        let json = br#"{"key": "u1", "attributes": {"plan": "pro"}}"#;
        assert_eq!(flagstream_context_from_json(json.as_ptr(), json.len(), &mut ctx), FlagstreamStatus::Ok);
        let (mut on, mut d) = (true, std::mem::zeroed::<FlagstreamDetail>());
        assert_eq!(
            flagstream_eval_bool(client, b"broken".as_ptr(), 6, ctx, true, &mut on, &mut d),
            FlagstreamStatus::Ok
        );
        assert_eq!(
            (on, d.reason, d.error_kind),
            (true, FLAGSTREAM_REASON_ERROR, FLAGSTREAM_ERROR_MALFORMED_FLAG)
        );
        flagstream_detail_free(&mut d);
        let mut stats = FlagstreamStats::default();
        assert_eq!(flagstream_client_stats(client, &mut stats), FlagstreamStatus::Ok);
        assert_eq!(stats.default_malformed, 1, "a fixed snapshot counts its own fallbacks");

        let mut flag = std::ptr::null_mut();
        assert_eq!(flagstream_flag_new(b"limit".as_ptr(), 5, &mut flag), FlagstreamStatus::Ok);
        let mut n = 0i64;
        assert_eq!(flagstream_eval_int_flag(client, flag, ctx, 0, &mut n, &mut d), FlagstreamStatus::Ok);
        let rule_id = std::slice::from_raw_parts(d.rule_id.ptr, d.rule_id.len);
        assert_eq!((n, d.reason, rule_id), (2, FLAGSTREAM_REASON_RULE_MATCH, &b"r"[..]));
        flagstream_detail_free(&mut d);
        flagstream_detail_free(&mut d);
        assert!(d.rule_id.ptr.is_null(), "a freed detail is emptied: a second free is harmless");

        // JSON null removes the attribute: the rule no longer matches.
        assert_eq!(
            flagstream_context_set_json(ctx, b"plan".as_ptr(), 4, b"null".as_ptr(), 4),
            FlagstreamStatus::Ok
        );
        assert_eq!(
            flagstream_eval_int_flag(client, flag, ctx, 0, &mut n, std::ptr::null_mut()),
            FlagstreamStatus::Ok
        );
        assert_eq!(n, 1);
        flagstream_flag_free(flag);

        let mut out = FlagstreamString { ptr: std::ptr::null_mut(), len: 0 };
        assert_eq!(
            flagstream_eval_at(
                client,
                b"name".as_ptr(),
                4,
                ctx,
                FLAGSTREAM_TYPE_STRING,
                b"\"z\"".as_ptr(),
                3,
                0,
                &mut out,
                &mut d
            ),
            FlagstreamStatus::Ok
        );
        assert_eq!(std::slice::from_raw_parts(out.ptr, out.len), b"\"b\"", "the off variation, as JSON");
        assert_eq!(d.reason, FLAGSTREAM_REASON_OFF);
        flagstream_string_free(out);
        let mut out = FlagstreamString { ptr: std::ptr::null_mut(), len: 0 };
        assert_eq!(
            flagstream_eval_at(
                client,
                b"name".as_ptr(),
                4,
                ctx,
                FLAGSTREAM_TYPE_BOOL,
                b"\"z\"".as_ptr(),
                3,
                0,
                &mut out,
                &mut d
            ),
            FlagstreamStatus::InvalidArgument
        );
        assert!(last_error().starts_with("default_json: \"z\" is not a bool"), "{}", last_error());
        assert_eq!(
            flagstream_eval_at(client, b"name".as_ptr(), 4, ctx, 9, b"1".as_ptr(), 1, 0, &mut out, &mut d),
            FlagstreamStatus::InvalidArgument
        );
        assert!(last_error().starts_with("value_type: 9"), "{}", last_error());
        flagstream_context_free(ctx);
        flagstream_client_free(client);
    }
}

/// `validate` without test data is refused by name; so is a bad duration.
#[test]
fn options_are_checked_by_name() {
    for (options, says) in [
        (r#"{"validate": false}"#, "options.validate: only with options.test_data"),
        (r#"{"endpoints": ["http://127.0.0.1:1"], "connect_timeout": -1}"#, "options.connect_timeout: -1 s"),
        (r#"{}"#, "options.endpoints: at least one relay URL"),
        (r#"{"endpoints": ["http://127.0.0.1:1"]}"#, "options.sdk_key: required"),
        (r#"{"endpoints": ["127.0.0.1:1"], "sdk_key": "k"}"#, "options.endpoints: \"127.0.0.1:1\" is not"),
        (
            r#"{"endpoints": ["https://127.0.0.1:1"], "sdk_key": "k", "tls_ca_pem": "not a certificate"}"#,
            "options: tls_ca_pem: no PEM certificate",
        ),
    ] {
        let mut client = std::ptr::null_mut();
        // SAFETY: valid pointers and lengths.
        let status = unsafe { flagstream_client_new(options.as_ptr(), options.len(), &mut client) };
        assert_eq!(status, FlagstreamStatus::InvalidArgument, "{options}");
        assert!(last_error().starts_with(says), "{options}: {}", last_error());
        assert!(client.is_null());
    }
}
