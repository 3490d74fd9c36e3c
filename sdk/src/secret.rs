//! [`Secret`]: a string that never shows itself in `Debug` or `Display`
//! output, for SDK keys and admin tokens held in configuration structs
//! (which are `Debug` and end up in logs and panic messages).

use std::fmt;

/// A secret string. `Debug` and `Display` print its kind and length only;
/// [`Secret::expose`] gives the value to the one place that sends it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The prefix (`fs_sdk_`, `fs_admin_`) says which kind it is; it is
        // not secret.
        // Only a flagstream prefix (`fs_` and lower-case letters) is shown:
        // anything else (a database URL) may hold the secret itself.
        let kind = self
            .0
            .strip_prefix("fs_")
            .and_then(|rest| rest.find('_').map(|j| &rest[..j]))
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase()))
            .map(|k| &self.0[..k.len() + 4]);
        write!(f, "<redacted {}{} bytes>", kind.map(|k| format!("{k}… ")).unwrap_or_default(), self.0.len())
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("fs_sdk_0123456789abcdef");
        assert_eq!(format!("{s:?}"), "<redacted fs_sdk_… 23 bytes>");
        assert_eq!(format!("{s}"), "<redacted fs_sdk_… 23 bytes>");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(<redacted fs_sdk_… 23 bytes>)");
        assert_eq!(s.expose(), "fs_sdk_0123456789abcdef");
        assert_eq!(format!("{:?}", Secret::new("nounderscore")), "<redacted 12 bytes>");
        // A URL's user and password never show, underscores or not.
        let url = Secret::new("postgres://flag_relay:pw_1@db_host/flags");
        assert_eq!(format!("{url}"), "<redacted 40 bytes>");
        assert_eq!(format!("{}", Secret::new("fs_admin_x")), "<redacted fs_admin_… 10 bytes>");
    }
}
