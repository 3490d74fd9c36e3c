//! An environment's CORS origins: the web origins whose pages may call
//! OFREP with its keys. Checked here (each `scheme://host[:port]` exactly
//! as a browser sends it in `Origin`, or `*`), stored in its metadata,
//! audited, and carried to replicas by the catalog.

use super::audit::{self, Access, Who};
use super::meta::EnvMeta;
use super::{Store, StoreError};

/// Most origins of one environment.
pub(crate) const MAX_ORIGINS: usize = 32;
/// Longest origin, bytes.
pub(crate) const MAX_ORIGIN_BYTES: usize = 256;

fn invalid(path: String, message: String) -> StoreError {
    StoreError::Invalid(flagstream::ValidationErrors(vec![flagstream::ValidationError { path, message }]))
}

/// Why `origin` is not an origin a browser sends, or `None`.
fn origin_problem(origin: &str) -> Option<String> {
    if origin == "*" {
        return None;
    }
    if origin.len() > MAX_ORIGIN_BYTES {
        return Some(format!("{} bytes, limit {MAX_ORIGIN_BYTES}", origin.len()));
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return Some(format!("{origin:?} is not scheme://host[:port] (or *)"));
    };
    if scheme.is_empty()
        || !scheme.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
    {
        return Some(format!("{origin:?}: the scheme must be lower-case (as browsers send it)"));
    }
    // `[v6]`, `[v6]:port`, `host` or `host:port`.
    let split = match rest.find(']') {
        Some(end) if rest.starts_with('[') => Some((&rest[..=end], &rest[end + 1..])),
        Some(_) => None,
        None if rest.starts_with('[') => None,
        None => Some(match rest.rsplit_once(':') {
            Some((h, _)) => (h, &rest[h.len()..]),
            None => (rest, ""),
        }),
    };
    let Some((host, port)) = split else {
        return Some(format!("{origin:?} is not scheme://host[:port] (or *)"));
    };
    let port = match port {
        "" => None,
        p => match p.strip_prefix(':') {
            Some(p) => Some(p),
            None => return Some(format!("{origin:?} is not scheme://host[:port] (or *)")),
        },
    };
    let bracketed = host.starts_with('[');
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b);
    let inner = if bracketed { &host[1..host.len() - 1] } else { host };
    if inner.is_empty() || !inner.bytes().all(|b| allowed(b) || (bracketed && b == b':')) {
        return Some(format!(
            "{origin:?}: the host must be lower-case letters, digits, '-' and '.' with no path (as browsers send it)"
        ));
    }
    if let Some(p) = port {
        if p.parse::<u16>().is_err() {
            return Some(format!("{origin:?}: port {p:?} is not a number up to 65535"));
        }
        if (scheme, p) == ("https", "443") || (scheme, p) == ("http", "80") {
            return Some(format!("{origin:?}: browsers leave out the scheme's default port {p}"));
        }
    }
    None
}

/// `origins` checked, sorted and without duplicates.
pub(crate) fn check_origins(origins: &[String]) -> Result<Vec<String>, StoreError> {
    if origins.len() > MAX_ORIGINS {
        return Err(invalid("origins".into(), format!("{} origins, limit {MAX_ORIGINS}", origins.len())));
    }
    for (i, o) in origins.iter().enumerate() {
        if let Some(why) = origin_problem(o) {
            return Err(invalid(format!("origins[{i}]"), why));
        }
    }
    let mut out = origins.to_vec();
    out.sort();
    out.dedup();
    Ok(out)
}

impl EnvMeta {
    /// Whether a page from `origin` may call OFREP with this environment's
    /// keys.
    pub(crate) fn allows_origin(&self, origin: &str) -> bool {
        self.cors_origins.iter().any(|o| o == "*" || o == origin)
    }
}

impl Store {
    /// Replaces `env`'s CORS origins; returns them as stored.
    pub(crate) async fn set_cors_origins(
        &self,
        env: &str,
        origins: &[String],
        who: &Who,
    ) -> Result<Vec<String>, StoreError> {
        self.check_writable()?;
        let origins = check_origins(origins)?;
        let who = who.clone();
        self.change_meta_audited(env, move |meta| {
            let details = format!("before: {:?}\nafter: {:?}\n", meta.cors_origins, origins);
            meta.cors_origins = origins.clone();
            let (name, revision) = (meta.name.clone(), meta.revision);
            let rec = audit::seal_access(
                Access::CorsOriginsSet,
                &name,
                details,
                revision,
                &who,
                &mut meta.audit_head,
            )?;
            Ok((origins, Some(rec)))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_what_browsers_send() {
        for ok in [
            "https://app.example.com",
            "http://localhost:8080",
            "*",
            "http://127.0.0.1:3000",
            "http://[::1]:8080",
            "http://[::1]",
            "https://x.example:8443",
        ] {
            assert_eq!(origin_problem(ok), None, "{ok}");
        }
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://App.example.com",
            "HTTPS://app.example.com",
            "https://app.example.com:99999",
            "https://",
            "https://a.example:",
            "http://[::1]x",
            "http://a:b:80",
            "http://[::1",
            "https://x.example:443",
            "http://x.example:80",
        ] {
            assert!(origin_problem(bad).is_some(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_ORIGINS).map(|i| format!("https://h{i}.example")).collect();
        assert!(matches!(check_origins(&many), Err(StoreError::Invalid(_))));
        let e = check_origins(&["https://a.example".into(), "nope".into()]).unwrap_err();
        assert!(e.to_string().contains("origins[1]"), "{e}");
        assert_eq!(
            check_origins(&[
                "https://b.example".into(),
                "https://a.example".into(),
                "https://b.example".into()
            ])
            .unwrap(),
            ["https://a.example", "https://b.example"]
        );
    }
}
