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
