//! An OFREP client as plain as the protocol: one HTTP/1.1 request per
//! connection over a real socket (`Connection: close`), the reply's
//! status, headers and JSON body; and a flagstream context in OFREP's
//! context form (`targetingKey`, `kind`, attributes; `kind: multi`).

use std::net::SocketAddr;

use flagstream::Context;
use serde_json::{Map, Value as Json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// One reply.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body (empty for a 304).
    pub body: String,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Json {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// `POST path` with `headers` and `body` to `addr`.
pub async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    request(addr, "POST", path, headers, body).await
}

/// `method path` with `headers` and `body` (a JSON content type when it is
/// not empty) to `addr`.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut raw = Vec::new();
    tokio::time::timeout(crate::STEP, async {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("the OFREP listener accepts");
        s.write_all(req.as_bytes()).await.expect("the request is sent");
        s.read_to_end(&mut raw).await.expect("the reply is read");
    })
    .await
    .expect("the relay answers in time");
    let text = String::from_utf8(raw).expect("a UTF-8 reply");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status_line = lines.next().expect("a reply with a status line");
    let status = status_line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: body.to_owned() }
}

/// Posts `body` until the answer's status is `want`, and returns the last
/// answer. For a change that reaches the OFREP listener with no event a
/// test can await over HTTP (a replica's catalog, another relay's feed):
/// a bounded poll, every 50 ms for at most `STEP`, asserting no timing.
pub async fn post_until(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    want: u16,
) -> Reply {
    let deadline = tokio::time::Instant::now() + crate::STEP;
    loop {
        let r = post(addr, path, headers, body).await;
        if r.status == want || tokio::time::Instant::now() > deadline {
            return r;
        }
        // A bounded poll (no event to await over HTTP), never a timing.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An open change stream (server-sent events), read line by line.
pub struct Events {
    /// The reply's status line.
    pub status: String,
    /// The reply's header lines, as sent.
    pub headers: Vec<String>,
    lines: tokio::io::Lines<BufReader<tokio::net::TcpStream>>,
}

impl Events {
    /// Opens the change stream at `uri` with `headers`
    /// (`Last-Event-ID`, `Origin`, ...).
    pub async fn open(addr: SocketAddr, uri: &str, headers: &[(&str, &str)]) -> Events {
        tokio::time::timeout(crate::STEP, async {
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("the OFREP listener accepts");
            let mut req = format!("GET {uri} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
            for (n, v) in headers {
                req.push_str(&format!("{n}: {v}\r\n"));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes()).await.expect("the request is sent");
            let mut lines = BufReader::new(s).lines();
            let status = lines.next_line().await.expect("a reply").expect("a status line");
            let mut headers = Vec::new();
            while let Some(h) = lines.next_line().await.expect("a header line") {
                if h.is_empty() {
                    break;
                }
                headers.push(h);
            }
            Events { status, headers, lines }
        })
        .await
        .expect("the relay answers in time")
    }

    /// The next line starting with `prefix`, without it.
    pub async fn next_with(&mut self, prefix: &str) -> String {
        while let Some(line) = tokio::time::timeout(crate::STEP, self.lines.next_line())
            .await
            .expect("in time")
            .expect("readable")
        {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
        panic!("the stream ended before a line starting {prefix:?}");
    }

    /// The next event's id and data (skipping comments and chunk framing).
    pub async fn next_event(&mut self) -> (String, Json) {
        let id = self.next_with("id: ").await;
        let data = self.next_with("data: ").await;
        (id, serde_json::from_str(&data).expect("JSON data"))
    }
}

/// A context in OFREP's form: `targetingKey`, `kind` and the attributes
/// of a single kind; `{"kind": "multi", <kind>: {targetingKey, ...}}`.
pub fn context_json(c: &Context<'_>) -> Json {
    if c.is_multi() {
        let mut m = Map::new();
        m.insert("kind".into(), Json::from("multi"));
        for k in c.kinds() {
            m.insert(k.context_kind().to_owned(), single(k, false));
        }
        return Json::Object(m);
    }
    single(c, true)
}

fn single(c: &Context<'_>, with_kind: bool) -> Json {
    let mut m = Map::new();
    m.insert("targetingKey".into(), Json::from(c.key()));
    if with_kind {
        m.insert("kind".into(), Json::from(c.context_kind()));
    }
    for (name, v) in c.attributes() {
        m.insert(name.to_owned(), v.to_json());
    }
    Json::Object(m)
}
