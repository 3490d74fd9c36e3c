//! Evaluation contexts from Python: a dict read in place for each call
//! (strings borrowed, nothing copied for up to four attributes), or a
//! prebuilt `flagstream.Context` that owns its data and is read as it is.

use std::borrow::Cow;

use flagstream::{AttrValue, Context, Scalar, Seq};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::convert::{to_json, utf8};

/// A context built once and reused: `Context({"key": "user-42", "country":
/// "US"})`. Evaluating with it converts nothing and allocates no Python
/// object.
#[pyclass(frozen, module = "flagstream._native", name = "Context")]
pub(crate) struct PyContext(pub(crate) Context<'static>);

#[pymethods]
impl PyContext {
    /// Builds a context from the same dict an evaluation accepts.
    #[new]
    fn new(context: &Bound<'_, PyDict>) -> PyResult<PyContext> {
        Ok(PyContext(from_dict(context)?.into_owned()))
    }

    /// The targeting key (of a multi-kind context: of its first kind).
    #[getter]
    fn key(&self) -> &str {
        self.0.key()
    }

    /// The kind (`multi` for a multi-kind context).
    #[getter]
    fn kind(&self) -> &str {
        if self.0.is_multi() { "multi" } else { self.0.context_kind() }
    }

    fn __repr__(&self) -> String {
        match serde_json::to_string(&self.0) {
            Ok(s) => format!("flagstream.Context(file form: {s})"),
            Err(e) => format!("flagstream.Context(<{e}>)"),
        }
    }
}

/// Calls `f` with the context `ctx` describes: a prebuilt `Context` as it
/// is, a dict converted (borrowing its strings) for this call only.
#[inline]
pub(crate) fn with_context<R>(ctx: &Bound<'_, PyAny>, f: impl FnOnce(&Context<'_>) -> R) -> PyResult<R> {
    if let Ok(pre) = ctx.cast::<PyContext>() {
        return Ok(f(&pre.get().0));
    }
    if let Ok(d) = ctx.cast::<PyDict>() {
        let c = from_dict(d)?;
        return Ok(f(&c));
    }
    Err(PyTypeError::new_err(format!(
        "context must be a dict or a flagstream.Context, not {}",
        ctx.get_type().name()?
    )))
}

/// A context from its dict form: `{"key": ..., "kind": ..., attr: value,
/// ...}` for one kind (kind `user` when absent), `{"kind": "multi", kind:
/// {"key": ..., attr: value, ...}, ...}` for several.
pub(crate) fn from_dict<'a>(d: &'a Bound<'_, PyDict>) -> PyResult<Context<'a>> {
    let kind = match d.get_item(intern!(d.py(), "kind"))? {
        Some(k) => Some(as_str(&k, "kind")?),
        None => None,
    };
    if kind != Some("multi") {
        return single(d, kind);
    }
    let n = d.len() - 1;
    if n == 0 {
        return Err(PyValueError::new_err("a multi-kind context needs at least one kind"));
    }
    if let Some(problem) = flagstream::context_kinds_problem(n) {
        return Err(PyValueError::new_err(problem));
    }
    let mut kinds = Vec::with_capacity(n);
    for (name, value) in d.iter() {
        let name = as_str(&name, "a context kind")?;
        if name == "kind" {
            continue;
        }
        let inner = value.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!("kind {name:?} of a multi-kind context must be a dict"))
        })?;
        // `d` holds `inner` and so its strings for 'a (see
        // `extend_lifetime`).
        if let Some(k) = inner.get_item(intern!(d.py(), "kind"))? {
            let k = as_str(&k, "kind")?;
            if k != name {
                return Err(PyValueError::new_err(format!("kind {name:?} holds a context of kind {k:?}")));
            }
        }
        kinds.push(single(inner, Some(name))?);
    }
    Context::multi(kinds).ok_or_else(|| PyValueError::new_err("a multi-kind context needs at least one kind"))
}

/// One kind. Its strings are borrowed from `d`, which the caller's own
/// borrow keeps alive for 'a (see `extend_lifetime`).
fn single<'a>(d: &Bound<'_, PyDict>, kind: Option<&'a str>) -> PyResult<Context<'a>> {
    let key = match d.get_item(intern!(d.py(), "key"))? {
        Some(k) => as_str(&k, "key")?,
        None => "",
    };
    let mut ctx = Context::new(Cow::Borrowed(key));
    if let Some(kind) = kind {
        if let Some(problem) = flagstream::reference::kind_problem(kind) {
            return Err(PyValueError::new_err(format!("kind: {problem}")));
        }
        ctx = ctx.kind(Cow::Borrowed(kind));
    }
    let mut attributes = 0;
    for (name, value) in d.iter() {
        let name: &'a str = as_str(&name, "an attribute name")?;
        if name == "key" || name == "kind" {
            continue;
        }
        attributes += 1;
        if let Some(v) = attr(&value)? {
            ctx.set(Cow::Borrowed(name), v);
        }
    }
    if let Some(problem) = flagstream::context_attributes_problem(attributes) {
        return Err(PyValueError::new_err(problem));
    }
    Ok(ctx)
}

/// A string borrowed from a key or value that the dict `d` (borrowed for
/// 'a) holds: the dict keeps the str object, and with it its UTF-8 buffer,
/// alive for 'a; no Python code runs while the context is in use.
fn extend_lifetime<'a>(s: &str) -> &'a str {
    // SAFETY: see the doc comment: every caller passes a str owned by a
    // dict borrowed for 'a, under the GIL, within one call.
    unsafe { std::mem::transmute::<&str, &'a str>(s) }
}

fn as_str<'a>(v: &Bound<'_, PyAny>, what: &str) -> PyResult<&'a str> {
    let s = v.cast::<PyString>().map_err(|_| PyTypeError::new_err(format!("{what} must be a str")))?;
    utf8(s).map(extend_lifetime)
}

/// An attribute value; `None` for Python `None` (a missing attribute).
fn attr<'a>(v: &Bound<'_, PyAny>) -> PyResult<Option<AttrValue<'a>>> {
    if v.is_none() {
        return Ok(None);
    }
    if let Some(s) = scalar(v)? {
        return Ok(Some(AttrValue::Scalar(s)));
    }
    let items: Option<Vec<Bound<'_, PyAny>>> = if let Ok(l) = v.cast::<PyList>() {
        Some(l.iter().collect())
    } else if let Ok(t) = v.cast::<PyTuple>() {
        Some(t.iter().collect())
    } else {
        None
    };
    if let Some(items) = items {
        let mut scalars = Vec::with_capacity(items.len());
        for x in &items {
            match scalar(x)? {
                Some(s) => scalars.push(s),
                None => return Ok(AttrValue::from_json(&to_json(v)?)),
            }
        }
        return Ok(Some(AttrValue::List(Seq::Owned(scalars))));
    }
    if v.cast::<PyDict>().is_ok() {
        return Ok(AttrValue::from_json(&to_json(v)?));
    }
    Err(PyTypeError::new_err(format!(
        "attribute values are None, bool, int, float, str, lists of them, or JSON dicts/lists; not {}",
        v.get_type().name()?
    )))
}

fn scalar<'a>(v: &Bound<'_, PyAny>) -> PyResult<Option<Scalar<'a>>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Some(Scalar::Str(Cow::Borrowed(extend_lifetime(utf8(s)?)))));
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Some(Scalar::Bool(b.is_true())));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Ok(Some(Scalar::Num(f.value())));
    }
    if v.cast::<PyInt>().is_ok() {
        return Ok(Some(Scalar::Num(v.extract::<f64>()?)));
    }
    Ok(None)
}
