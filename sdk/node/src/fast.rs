//! The evaluation hot path as plain N-API callbacks, without napi-rs's
//! class machinery (per-call `this` unwrapping, type-tag checks and borrow
//! tracking cost several times the evaluation itself).
//!
//! Clients and prebuilt contexts live in per-JS-thread tables and JS holds
//! their ids (small integers): a call reads its arguments with a handful of
//! N-API calls (the key into a stack buffer), looks the ids up — bounds
//! checked, so a forged id is an error, never memory unsafety — and
//! evaluates. `index.js` frees a context's id when the `Context` is
//! collected (a `FinalizationRegistry`) and a client's at `close()` (or
//! when its `NativeClient` is collected).
//!
//! Contexts, in the object form (README "Node"): one kind is `{key, kind,
//! ...attributes}` (`key` default `""`, `kind` default `user`, every other
//! property an attribute: strings, numbers and booleans are scalars, arrays
//! of scalars lists, other arrays and objects JSON attributes, `null` a
//! missing attribute); several kinds are `{kind: "multi", user: {...},
//! org: {...}}`, every other property one kind named by the property (its
//! own `kind` ignored). index.js passes a flat object context (all
//! properties primitives) in a packed form ([`with_packed`]: no JSON, no
//! allocation), the same flat object as last time as the id of a context
//! read from it once (`contextSet`), a flat object with the same names
//! as the last one but other values as its changed values only (the
//! values form, [`with_values`]), and any other object as its
//! `JSON.stringify` text ([`from_json_text`]); [`from_object`] reads an
//! object directly with the same rules (for direct callers of the addon).
//! An invalid kind name or more kinds or attributes than the context
//! limits allow is a `TypeError`.

use std::ffi::c_char;
use std::ptr;

use flagstream::{Client, Context};
use napi::sys;

use crate::js_context::*;
use crate::napi_value::*;
use crate::tables::TABLES;
use crate::values::{MAX_VALUES, shape_set, update, with_values};

/// The arguments of a typed evaluation: `(clientId, key, ctx, default)`,
/// then, for the values form (`ctx` is `true`, ignored), the mask and up to
/// [`MAX_VALUES`] values.
type Args = ([sys::napi_value; 5 + MAX_VALUES], usize);

unsafe fn args4(env: sys::napi_env, info: sys::napi_callback_info) -> R<Args> {
    let mut argc = 5 + MAX_VALUES;
    let mut argv = [ptr::null_mut(); 5 + MAX_VALUES];
    check(
        unsafe {
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut())
        },
        "arguments",
    )?;
    if argc < 4 {
        return Err(Thrown(format!(
            "expected (key, context, default), got {} argument(s)",
            argc.saturating_sub(1)
        )));
    }
    Ok((argv, argc))
}

/// Evaluates with the client `argv[0]`, the key `argv[1]`, the context
/// `argv[2]` (with more arguments: the values form, [`with_values`], the
/// mask and values changed after the default, applied first); a closed
/// client gives `closed()`; `None` for a packed context or values that form
/// cannot say (index.js passes the JSON text then).
///
/// The client is borrowed from its table for the evaluation, not cloned
/// (an `Arc` clone and drop are two atomic operations a call). It is
/// looked up again after the context is read: reading an object context
/// (a direct caller's) may run a getter, which may close the client.
unsafe fn evaluate<T>(
    env: sys::napi_env,
    (argv, argc): &Args,
    closed: impl FnOnce() -> T,
    f: impl FnOnce(&Client, &str, &Context<'_>) -> T,
) -> R<Option<T>> {
    TABLES.with(|tables| unsafe {
        // index.js passes more than 4 arguments for the values form only.
        let values = *argc > 4;
        if values {
            update(env, &mut tables.shape.borrow_mut(), &argv[4..(*argc).min(argv.len())])?;
        }
        let id = id_of(env, argv[0], "the client")?;
        if tables.clients.borrow().get(id).is_none() {
            return Ok(Some(closed()));
        }
        with_str(env, argv[1], "the flag key", |key| {
            let eval = |ctx: &Context<'_>| match tables.clients.borrow().get(id) {
                Some(client) => f(client, key, ctx),
                None => closed(),
            };
            if values {
                with_values(&tables.shape.borrow(), eval)
            } else {
                with_any_context_in(env, &tables.contexts, argv[2], eval)
            }
        })?
    })
}

unsafe fn finish(env: sys::napi_env, r: R<sys::napi_value>) -> sys::napi_value {
    match r {
        Ok(v) => v,
        Err(e) => unsafe { throw(env, e) },
    }
}

unsafe extern "C" fn eval_bool(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = bool_of(env, argv.0[3], "the default")?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.bool(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_get_boolean(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_number(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = f64_of(env, argv.0[3], "the default")?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.float(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_create_double(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_int(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default =
            crate::int_default(f64_of(env, argv.0[3], "the default")?).map_err(|e| Thrown(e.reason))?;
        let Some(v) = evaluate(env, &argv, || default, |c, k, x| c.int(k, x, default))? else {
            return undefined(env);
        };
        let mut out = ptr::null_mut();
        check(sys::napi_create_int64(env, v, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

unsafe extern "C" fn eval_string(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let argv = args4(env, info)?;
        let default = string(env, argv.0[3], "the default")?;
        let create = |s: &str| {
            let mut out = ptr::null_mut();
            check(
                sys::napi_create_string_utf8(env, s.as_ptr().cast::<c_char>(), s.len() as isize, &mut out),
                "result",
            )
            .map(|()| out)
        };
        match evaluate(env, &argv, || create(&default), |c, k, x| c.string_with(k, x, &default, create))? {
            Some(v) => v,
            None => undefined(env),
        }
    })();
    unsafe { finish(env, r) }
}

/// `contextNew(obj)`: reads a context once; returns its id.
unsafe extern "C" fn context_new(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 1usize;
        let mut argv = [ptr::null_mut(); 1];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let ctx = if type_of(env, argv[0])? == sys::ValueType::napi_string {
            with_str(env, argv[0], "a context", from_json_text)??
        } else {
            from_object(env, argv[0])?
        };
        let id = TABLES.with(|t| t.contexts.borrow_mut().insert(ctx));
        let mut out = ptr::null_mut();
        check(sys::napi_create_uint32(env, id, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// `contextSet(id, packed)`: replaces the context `id` (index.js's reused
/// context of plain objects) by the one read from the packed form
/// ([`with_packed`]); false, and nothing replaced, when that form cannot
/// say or the context is invalid (index.js then passes the packed form
/// itself to the evaluation).
unsafe extern "C" fn context_set(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 2usize;
        let mut argv = [ptr::null_mut(); 2];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let id = id_of(env, argv[0], "a Context")?;
        let ctx = with_str(env, argv[1], "a packed context", |s| {
            // An invalid context (kind, attribute count) is not kept
            // either: index.js passes the packed form to the evaluation,
            // which throws its error, or returns the default for a closed
            // client without reading the context.
            if is_packed(s) { with_packed(s, |c| c.clone().into_owned()).ok().flatten() } else { None }
        })?;
        let set = match ctx {
            Some(ctx) => {
                if !TABLES.with(|t| t.contexts.borrow_mut().replace(id, ctx)) {
                    return Err(Thrown("contextSet: no such context".into()));
                }
                true
            }
            None => false,
        };
        let mut out = ptr::null_mut();
        check(sys::napi_get_boolean(env, set, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// `contextFree(id)`: forgets a context (its `Context` was collected).
unsafe extern "C" fn context_free(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 1usize;
        let mut argv = [ptr::null_mut(); 1];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let id = id_of(env, argv[0], "a Context")?;
        TABLES.with(|t| t.contexts.borrow_mut().remove(id));
        let mut out = ptr::null_mut();
        check(sys::napi_get_undefined(env, &mut out), "result")?;
        Ok(out)
    })();
    unsafe { finish(env, r) }
}

/// The raw functions, as an object (`native.fastApi()`).
pub(crate) fn api(env: &napi::Env) -> napi::Result<napi::bindgen_prelude::Object<'_>> {
    type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;
    let fns: [(&std::ffi::CStr, Callback); 8] = [
        (c"bool", eval_bool),
        (c"number", eval_number),
        (c"int", eval_int),
        (c"string", eval_string),
        (c"contextNew", context_new),
        (c"contextSet", context_set),
        (c"contextFree", context_free),
        (c"shapeSet", shape_set),
    ];
    let mut obj = napi::bindgen_prelude::Object::new(env)?;
    for (name, cb) in fns {
        let mut f = ptr::null_mut();
        // SAFETY: a plain N-API function of this env (the name NUL-ended:
        // length -1, NAPI_AUTO_LENGTH); `cb` matches the callback
        // signature and uses no data pointer.
        let status = unsafe {
            sys::napi_create_function(env.raw(), name.as_ptr(), -1, Some(cb), ptr::null_mut(), &mut f)
        };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_reason(format!("creating {name:?} failed ({status})")));
        }
        // SAFETY: `f` is the function just created in this env.
        let f = unsafe { napi::bindgen_prelude::Unknown::from_raw_unchecked(env.raw(), f) };
        obj.set(name.to_str().unwrap_or("fn"), f)?;
    }
    Ok(obj)
}
