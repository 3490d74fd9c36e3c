//! Building a Rust client from `flagstream.Client`'s keyword options:
//! each option checked and named in its error (durations in seconds, PEM
//! files, endpoints, flag sets), the build itself (without the GIL for a
//! new client), and the `at=` argument of evaluations.

use std::time::Duration;

use flagstream::{Builder, FlagSet};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert::{to_json, utf8};
use crate::runtime;

pub(crate) fn secs(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let s: f64 = v.extract().map_err(|_| PyTypeError::new_err(format!("{name}: seconds as a number")))?;
    Duration::try_from_secs_f64(s).map_err(|e| PyValueError::new_err(format!("{name}: {s} s: {e}")))
}

pub(crate) fn pem(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(utf8(s)?.as_bytes().to_vec());
    }
    v.extract::<Vec<u8>>().map_err(|_| PyTypeError::new_err(format!("{name}: PEM as str or bytes")))
}

/// Applies `Client(**options)` to the builder.
pub(crate) fn apply_options(mut b: Builder, options: Option<&Bound<'_, PyDict>>) -> PyResult<Builder> {
    let Some(options) = options else { return Ok(b) };
    for (name, v) in options.iter() {
        let name: String = name.extract()?;
        b = match name.as_str() {
            "connect_timeout" => b.connect_timeout(secs(&name, &v)?),
            "keepalive_interval" => b.keepalive_interval(secs(&name, &v)?),
            "keepalive_timeout" => b.keepalive_timeout(secs(&name, &v)?),
            "tcp_user_timeout" => b.tcp_user_timeout(secs(&name, &v)?),
            "first_message_timeout" => b.first_message_timeout(secs(&name, &v)?),
            "heartbeat_default" => b.heartbeat_default(secs(&name, &v)?),
            "backoff_base" => b.backoff_base(secs(&name, &v)?),
            "backoff_cap" => b.backoff_cap(secs(&name, &v)?),
            "healthy_after" => b.healthy_after(secs(&name, &v)?),
            "stall_jitter" => b.stall_jitter(secs(&name, &v)?),
            "stale_after" => b.stale_after(secs(&name, &v)?),
            "cache_write_interval" => b.cache_write_interval(secs(&name, &v)?),
            "watchdog_misses" => b.watchdog_misses(v.extract()?),
            "usage_interval" => b.usage_interval(secs(&name, &v)?),
            "usage_reports" => b.usage_reports(v.extract()?),
            "keep_endpoint_order" => {
                if v.extract::<bool>()? {
                    b.keep_endpoint_order()
                } else {
                    b
                }
            }
            "tls_ca_pem" => b.tls_ca_pem(pem(&name, &v)?),
            "tls_identity_pem" => {
                let (cert, key): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v.extract()?;
                b.tls_identity_pem(pem("tls_identity_pem[0]", &cert)?, pem("tls_identity_pem[1]", &key)?)
            }
            other => return Err(PyTypeError::new_err(format!("Client() got an unknown option {other:?}"))),
        };
    }
    Ok(b)
}

/// Builds the client without the GIL: opening the cache may wait for its
/// lock (up to 500 ms, a client of this process that was just dropped)
/// and reads it, and compiling test data or a flag file takes as long as
/// the flags do. The runtime is fetched first, with the GIL (see
/// [`runtime`]).
pub(crate) fn build_detached(py: Python<'_>, b: Builder) -> PyResult<flagstream::Client> {
    let rt = runtime()?;
    py.detach(move || {
        let _in_runtime = rt.enter();
        b.build().map_err(build_error)
    })
}

fn build_error(e: flagstream::BuildError) -> PyErr {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    PyValueError::new_err(msg)
}

pub(crate) fn flag_set(v: &Bound<'_, PyAny>) -> PyResult<FlagSet> {
    let json = to_json(v)?;
    serde_json::from_value(json).map_err(|e| PyValueError::new_err(format!("test data: {e}")))
}

pub(crate) fn endpoints(v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(utf8(s)?.split(',').map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect());
    }
    v.extract::<Vec<String>>().map_err(|_| PyTypeError::new_err("endpoints: a list of URLs (or one str)"))
}

/// `at` as Unix milliseconds: an int, or a `datetime` (its `timestamp()`).
pub(crate) fn at_ms(at: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    let Some(at) = at else { return Ok(None) };
    if at.is_none() {
        return Ok(None);
    }
    if let Ok(ms) = at.extract::<i64>() {
        return Ok(Some(ms));
    }
    if at.hasattr("timestamp")? {
        let s: f64 = at.call_method0("timestamp")?.extract()?;
        return Ok(Some((s * 1000.0).round() as i64));
    }
    Err(PyTypeError::new_err("at: Unix milliseconds (int) or a datetime"))
}
