//! The values form of a flat object context. index.js records the last
//! flat object it passed (its own enumerable names and values); an object
//! with the same names, in the same order (the next context built by the
//! same code), is passed as the values that changed only: a bit mask of
//! their positions and the values, one N-API argument each (no string
//! built in JS, none parsed here). The addon holds the names and the
//! current values ([`Shape`], in [`crate::tables::Tables`]: set by `shapeSet(names, values)`, updated by
//! every call in this form before anything else, so that it stays what
//! index.js recorded even when the client is closed or the context is
//! invalid). Read into exactly the context
//! [`crate::js_context::with_packed`] reads from the object's packed form,
//! or the same error; a string changed is copied into the buffer that held
//! the value before (no allocation once it is large enough).

use std::ffi::c_char;
use std::ptr;

use flagstream::{AttrValue, Context};
use napi::sys;

use crate::js_context::check_kind;
use crate::napi_value::*;
use crate::tables::{Held, Shape};

/// The most values a context passes in this form (index.js `MAX_VALUES`).
pub(crate) const MAX_VALUES: usize = 8;

/// The largest integer every `f64` up to which is one (2^53 - 1).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

impl Shape {
    /// The string at `at` (`Some(None)`: no such name, or null/undefined),
    /// `None` when the packed form would not read it (not a string, or a
    /// lone surrogate's U+FFFD).
    fn text(&self, at: Option<usize>) -> Option<Option<&str>> {
        match at.map(|i| &self.values[i]) {
            None | Some(Held::Skip) => Some(None),
            Some(Held::Str(s, true)) => Some(Some(s)),
            Some(_) => None,
        }
    }
}

/// Reads `v` into `held` (reusing its string buffer).
unsafe fn read(env: sys::napi_env, v: sys::napi_value, held: &mut Held) -> R<()> {
    *held = match unsafe { type_of(env, v)? } {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => Held::Skip,
        sys::ValueType::napi_boolean => Held::Bool(unsafe { bool_of(env, v, "a context value")? }),
        sys::ValueType::napi_number => {
            let x = unsafe { f64_of(env, v, "a context value")? };
            if x.fract() != 0.0 || x.abs() > MAX_SAFE_INTEGER {
                Held::Other
            } else {
                // JSON.stringify(-0) is "0": read as 0.
                Held::Num(if x == 0.0 { 0.0 } else { x })
            }
        }
        sys::ValueType::napi_string => {
            let mut s = match std::mem::replace(held, Held::Skip) {
                Held::Str(s, _) => s,
                _ => String::new(),
            };
            s.clear();
            let mut buf = [0u8; 128];
            let mut len = 0usize;
            check(
                unsafe {
                    sys::napi_get_value_string_utf8(
                        env,
                        v,
                        buf.as_mut_ptr().cast::<c_char>(),
                        buf.len(),
                        &mut len,
                    )
                },
                "a context value",
            )?;
            if len + 1 < buf.len() {
                match std::str::from_utf8(&buf[..len]) {
                    Ok(t) => s.push_str(t),
                    Err(_) => return Err(Thrown("a context value: not UTF-8".into())),
                }
            } else {
                s = unsafe { string(env, v, "a context value")? };
            }
            let clean = s.is_ascii() || !s.contains('\u{FFFD}');
            Held::Str(s, clean)
        }
        _ => Held::Other,
    };
    Ok(())
}

/// Applies a call's changed values: `args` is the mask of the positions
/// changed, then their values in order.
pub(crate) unsafe fn update(env: sys::napi_env, shape: &mut Shape, args: &[sys::napi_value]) -> R<()> {
    let Some((&mask, changed)) = args.split_first() else {
        return Err(Thrown("the values form: no mask".into()));
    };
    let mask = unsafe { id_of(env, mask, "the values form's mask")? };
    let mut next = changed.iter();
    for (i, held) in shape.values.iter_mut().enumerate() {
        if mask & (1 << i) != 0 {
            let Some(&v) = next.next() else {
                return Err(Thrown("the values form: too few values".into()));
            };
            unsafe { read(env, v, held)? };
        }
    }
    if mask >> shape.values.len() != 0 {
        return Err(Thrown("the values form: a position past the names".into()));
    }
    Ok(())
}

/// Runs `f` on the context of the names and values held: the packed
/// form's context, or `Ok(None)` whenever that form would say `None` (a
/// lone surrogate, a `multi` kind, a non-string key or kind) or a value is
/// not one this form takes: index.js then passes the JSON text.
pub(crate) fn with_values<T>(shape: &Shape, f: impl FnOnce(&Context<'_>) -> T) -> R<Option<T>> {
    if shape.names.is_empty() {
        return Ok(None);
    }
    // A non-string key or kind: the JSON path's error.
    let (Some(key), Some(kind)) = (shape.text(shape.key_at), shape.text(shape.kind_at)) else {
        return Ok(None);
    };
    let mut ctx = Context::new(key.unwrap_or(""));
    if let Some(k) = kind {
        if k == "multi" {
            return Ok(None);
        }
        check_kind(k)?;
        ctx = ctx.kind(k);
    }
    let mut attributes = 0usize;
    for (i, (name, held)) in shape.names.iter().zip(&shape.values).enumerate() {
        if Some(i) == shape.key_at || Some(i) == shape.kind_at {
            continue;
        }
        let a: AttrValue<'_> = match held {
            Held::Skip => continue,
            Held::Num(x) => (*x).into(),
            Held::Bool(b) => (*b).into(),
            Held::Str(s, true) => s.as_str().into(),
            Held::Str(_, false) | Held::Other => return Ok(None),
        };
        attributes += 1;
        ctx.set(name.as_str(), a);
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(Thrown(format!("context: {problem}")));
    }
    Ok(Some(f(&ctx)))
}

/// `shapeSet(names, values)`: the names and values of the values form.
pub(crate) unsafe extern "C" fn shape_set(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    let r = (|| unsafe {
        let mut argc = 2usize;
        let mut argv = [ptr::null_mut(); 2];
        check(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()),
            "arguments",
        )?;
        let mut n = 0u32;
        check(sys::napi_get_array_length(env, argv[0], &mut n), "shapeSet: the names")?;
        if n as usize > MAX_VALUES {
            return Err(Thrown(format!("shapeSet: more than {MAX_VALUES} names")));
        }
        let mut names = Vec::with_capacity(n as usize);
        let mut values = Vec::with_capacity(n as usize);
        for i in 0..n {
            names.push(string(env, element(env, argv[0], i)?, "a property name")?);
            let mut held = Held::Skip;
            read(env, element(env, argv[1], i)?, &mut held)?;
            values.push(held);
        }
        let key_at = names.iter().position(|n| n == "key");
        let kind_at = names.iter().position(|n| n == "kind");
        crate::tables::TABLES.with(|t| *t.shape.borrow_mut() = Shape { names, values, key_at, kind_at });
        undefined(env)
    })();
    match r {
        Ok(v) => v,
        Err(e) => unsafe { throw(env, e) },
    }
}
